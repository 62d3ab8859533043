package main

import (
	"context"
	"database/sql"
	"fmt"
	"strings"

	_ "github.com/jackc/pgx/v5/stdlib" // the PostgreSQL driver, registered as "pgx"
	_ "modernc.org/sqlite"             // the pure-Go SQLite driver, registered as "sqlite"

	"github.com/keyorder/keyorder/dbtest/pgtest"
	"github.com/keyorder/keyorder/internal/sqldb"
	"github.com/keyorder/keyorder/publisher/outbox"
	"github.com/keyorder/keyorder/subscriber/inbox"
)

// store is one of the story's two databases: the writers' (their accounts
// and the outbox) or the receivers' (the balances, the journal of applied
// events, and the inbox). A dsn that starts with "postgres:" is a
// PostgreSQL DSN; anything else is the path of a SQLite file.
type store struct {
	db       *sql.DB
	postgres bool
	dsn      string // PostgreSQL's, for a listener's connection
}

func openStore(dsn string) (*store, error) {
	s := &store{}
	var err error
	if rest, ok := strings.CutPrefix(dsn, "postgres:"); ok {
		s.postgres, s.dsn = true, rest
		s.db, err = sql.Open("pgx", rest)
	} else {
		// WAL, so that readers do not wait on the writer; a busy timeout,
		// so that the processes' writers take turns; immediate
		// transactions, which take the write lock at BEGIN, as the
		// outbox's and the inbox's transactions need on SQLite.
		s.db, err = sql.Open("sqlite", "file:"+dsn+"?_pragma=busy_timeout(30000)&_pragma=journal_mode(WAL)&_pragma=synchronous(FULL)&_txlock=immediate")
	}
	if err != nil {
		return nil, err
	}
	return s, nil
}

func (s *store) Close() error { return s.db.Close() }

// listener returns, on PostgreSQL, the option that wakes a relay at the
// outbox's commits, from any process; SQLite has no notifications, and a
// relay there polls for the events of other processes.
func (s *store) listener() []outbox.RelayOption {
	if !s.postgres {
		return nil
	}
	// database/sql cannot wait for a notification: the listener has a
	// connection of its own, with pgx.
	return []outbox.RelayOption{outbox.WithListener(pgtest.Listener(s.dsn))}
}

func (s *store) q(query string) string { return sqldb.Rebind(s.postgres, query) }

func (s *store) outboxDialect() outbox.Dialect {
	if s.postgres {
		return outbox.PostgreSQL
	}
	return outbox.SQLite
}

func (s *store) inboxDialect() inbox.Dialect {
	if s.postgres {
		return inbox.PostgreSQL
	}
	return inbox.SQLite
}

// The writers' table: an account's balance and its version, which each
// change moves on by one. The row lock each change takes orders the
// versions of an account in commit order, so the versions are the truth
// the receivers' journal is checked against, kept apart from the
// outbox's own numbering.
const sourceSchema = `CREATE TABLE IF NOT EXISTS accounts (
	key     TEXT PRIMARY KEY,
	version BIGINT NOT NULL,
	balance BIGINT NOT NULL
)`

// The receivers' tables. journal records each application in the order
// the receivers applied them (id), with no unique constraint, so that the
// check can see an event applied twice or out of order.
var sinkSchema = []string{
	`CREATE TABLE IF NOT EXISTS balances (
	key     TEXT PRIMARY KEY,
	balance BIGINT NOT NULL
)`,
	`CREATE TABLE IF NOT EXISTS journal (
	id         %s,
	key        TEXT   NOT NULL,
	version    BIGINT NOT NULL,
	amount     BIGINT NOT NULL,
	committed  BIGINT NOT NULL,
	applied    BIGINT NOT NULL,
	replica    TEXT   NOT NULL
)`,
}

func (s *store) createSource(ctx context.Context) error {
	_, err := s.db.ExecContext(ctx, sourceSchema)
	return err
}

func (s *store) createSink(ctx context.Context) error {
	serial := "INTEGER PRIMARY KEY AUTOINCREMENT"
	if s.postgres {
		serial = "BIGSERIAL PRIMARY KEY"
	}
	for _, stmt := range sinkSchema {
		if strings.Contains(stmt, "%s") {
			stmt = fmt.Sprintf(stmt, serial)
		}
		if _, err := s.db.ExecContext(ctx, stmt); err != nil {
			return err
		}
	}
	return nil
}

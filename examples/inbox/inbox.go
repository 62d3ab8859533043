package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"strconv"

	_ "modernc.org/sqlite" // the pure-Go SQLite driver, registered as "sqlite"

	"github.com/keyorder/keyorder/subscriber"
	"github.com/keyorder/keyorder/subscriber/inbox"
)

// store is the receiver's own database: the accounts the deposits change,
// and keyorder's inbox, the record of the stamps applied (package
// subscriber/inbox). The inbox writes a deposit's record in the
// transaction that applies it, so after a crash the store holds a
// deposit's effect exactly when it holds its record, and a redelivery of
// a deposit applied before the crash changes nothing.
type store struct {
	db *sql.DB
	in *inbox.Inbox
}

// schema is the receiver's own tables. journal has no unique constraint,
// on purpose: it records each application, so that the check can count
// them. counters holds what the receivers report, for the check.
const schema = `
CREATE TABLE IF NOT EXISTS accounts (
	key     TEXT PRIMARY KEY,
	balance INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS journal (
	key        TEXT    NOT NULL,
	producer   TEXT    NOT NULL,
	seq        INTEGER NOT NULL,
	amount     INTEGER NOT NULL,
	message_id TEXT    NOT NULL
);
CREATE TABLE IF NOT EXISTS counters (
	name TEXT PRIMARY KEY,
	n    INTEGER NOT NULL
);`

// openStore opens, or creates, the store in the SQLite file at path. WAL,
// so that a process killed in the middle of a transaction leaves the file
// as it was before the transaction; a busy timeout, so that the writers
// take turns rather than fail (the inbox's lock, on SQLite, is the
// database's write lock); immediate transactions, which take that lock at
// BEGIN.
func openStore(ctx context.Context, path string, log *slog.Logger) (*store, error) {
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)&_pragma=synchronous(FULL)&_txlock=immediate")
	if err != nil {
		return nil, err
	}
	if _, err := db.ExecContext(ctx, schema); err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("store %s: %w", path, err)
	}
	in, err := inbox.New(ctx, db, inbox.SQLite, inbox.WithLogger(log))
	if err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("store %s: %w", path, err)
	}
	return &store{db: db, in: in}, nil
}

func (s *store) Close() error { return errors.Join(s.in.Close(), s.db.Close()) }

// handler is the receiver's handler: the inbox's, around deposit.
func (s *store) handler() subscriber.Handler { return s.in.Handler(deposit) }

// deposit adds the message's amount to its account, in tx, the inbox's
// transaction, and journals it. The inbox calls it only for a deposit not
// applied before, by this process or the one killed.
func deposit(ctx context.Context, tx *sql.Tx, d *subscriber.Delivery) error {
	amount, err := strconv.ParseInt(string(d.Data), 10, 64)
	if err != nil {
		return subscriber.Permanent(fmt.Errorf("message %s: %w", d.ID, err))
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO accounts (key, balance) VALUES (?, ?)
		ON CONFLICT (key) DO UPDATE SET balance = balance + excluded.balance`, d.Key, amount); err != nil {
		return err
	}
	_, err = tx.ExecContext(ctx, `INSERT INTO journal (key, producer, seq, amount, message_id) VALUES (?, ?, ?, ?, ?)`,
		d.Key, d.Producer, int64(d.Seq), amount, d.ID)
	return err
}

// addRedelivered adds n to the count of deliveries the inbox found applied
// already, which a receiver reports as it exits.
func (s *store) addRedelivered(ctx context.Context, n int64) error {
	_, err := s.db.ExecContext(ctx, `INSERT INTO counters (name, n) VALUES ('redelivered', ?)
		ON CONFLICT (name) DO UPDATE SET n = n + excluded.n`, n)
	return err
}

// applied returns how many effects the journal holds.
func (s *store) applied(ctx context.Context) (int, error) {
	var n int
	err := s.db.QueryRowContext(ctx, `SELECT COUNT(*) FROM journal`).Scan(&n)
	return n, err
}

// report is what the store holds, for the check.
type report struct {
	applied     int              // effects in the journal
	twice       []string         // "key#seq" applied more than once
	balances    map[string]int64 // by key
	redelivered int              // deliveries found applied already
}

func (s *store) report(ctx context.Context) (report, error) {
	rep := report{balances: map[string]int64{}}
	if err := s.db.QueryRowContext(ctx, `SELECT COUNT(*) FROM journal`).Scan(&rep.applied); err != nil {
		return rep, err
	}
	if err := s.db.QueryRowContext(ctx, `SELECT COALESCE((SELECT n FROM counters WHERE name = 'redelivered'), 0)`).Scan(&rep.redelivered); err != nil {
		return rep, err
	}
	rows, err := s.db.QueryContext(ctx, `SELECT key, seq, COUNT(*) FROM journal GROUP BY key, producer, seq HAVING COUNT(*) > 1 ORDER BY key, seq`)
	if err != nil {
		return rep, err
	}
	for rows.Next() {
		var (
			key    string
			seq, n int64
		)
		if err := rows.Scan(&key, &seq, &n); err != nil {
			_ = rows.Close()
			return rep, err
		}
		rep.twice = append(rep.twice, fmt.Sprintf("%s#%d (%d times)", key, seq, n))
	}
	if err := rows.Close(); err != nil {
		return rep, err
	}
	rows, err = s.db.QueryContext(ctx, `SELECT key, balance FROM accounts`)
	if err != nil {
		return rep, err
	}
	defer rows.Close()
	for rows.Next() {
		var (
			key string
			b   int64
		)
		if err := rows.Scan(&key, &b); err != nil {
			return rep, err
		}
		rep.balances[key] = b
	}
	return rep, rows.Err()
}

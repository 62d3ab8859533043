package main

import (
	"context"
	"database/sql"
	"fmt"

	_ "modernc.org/sqlite" // the pure-Go SQLite driver, registered as "sqlite"

	"github.com/keyorder/keyorder/subscriber"
)

// An inbox is the receiver's own store: the accounts the messages change,
// and, per key and producer, the last sequence number applied. Both are
// written in one transaction, so after a crash the store holds a message's
// effect exactly when it holds its number, and a redelivery of a message
// applied before the crash changes nothing.
type inbox struct{ db *sql.DB }

// schema is the inbox's tables. journal has no unique constraint, on
// purpose: it records each application, so that a check can count them.
const schema = `
CREATE TABLE IF NOT EXISTS inbox (
	key      TEXT    NOT NULL,
	producer TEXT    NOT NULL,
	last_seq INTEGER NOT NULL,
	PRIMARY KEY (key, producer)
);
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

// openInbox opens, or creates, the inbox in the SQLite file at path. It is
// written by one connection at a time, and in WAL mode, so that a process
// killed in the middle of a transaction leaves the file as it was before
// the transaction, and the next process that opens it finds it so.
func openInbox(path string) (*inbox, error) {
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)&_pragma=synchronous(FULL)")
	if err != nil {
		return nil, err
	}
	db.SetMaxOpenConns(1)
	if _, err := db.Exec(schema); err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("inbox %s: %w", path, err)
	}
	return &inbox{db: db}, nil
}

func (in *inbox) Close() error { return in.db.Close() }

// apply adds amount to d.Key's balance, unless d was applied before, and
// reports whether it did. Its number and its effect are written in one
// transaction: the number first, with the conditional update that is the
// whole of the check, then, if it moved, the effect.
func (in *inbox) apply(ctx context.Context, d *subscriber.Delivery, amount int64) (applied bool, err error) {
	tx, err := in.db.BeginTx(ctx, nil)
	if err != nil {
		return false, err
	}
	defer func() {
		if err != nil {
			_ = tx.Rollback()
		}
	}()
	// The one-line check: move the key's last applied number forward, or
	// change nothing if d's number is not past it.
	res, err := tx.ExecContext(ctx, `INSERT INTO inbox (key, producer, last_seq) VALUES (?, ?, ?)
		ON CONFLICT (key, producer) DO UPDATE SET last_seq = excluded.last_seq WHERE excluded.last_seq > inbox.last_seq`,
		d.Key, d.Producer, int64(d.Seq))
	if err != nil {
		return false, err
	}
	moved, err := res.RowsAffected()
	if err != nil {
		return false, err
	}
	if moved == 0 {
		// Applied before: count it, so that the check can show that
		// redeliveries came and changed nothing.
		if err := bump(ctx, tx, "redelivered"); err != nil {
			return false, err
		}
		return false, tx.Commit()
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO accounts (key, balance) VALUES (?, ?)
		ON CONFLICT (key) DO UPDATE SET balance = balance + excluded.balance`, d.Key, amount); err != nil {
		return false, err
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO journal (key, producer, seq, amount, message_id) VALUES (?, ?, ?, ?, ?)`,
		d.Key, d.Producer, int64(d.Seq), amount, d.ID); err != nil {
		return false, err
	}
	return true, tx.Commit()
}

func bump(ctx context.Context, tx *sql.Tx, name string) error {
	_, err := tx.ExecContext(ctx, `INSERT INTO counters (name, n) VALUES (?, 1)
		ON CONFLICT (name) DO UPDATE SET n = n + 1`, name)
	return err
}

// applied returns how many effects the journal holds.
func (in *inbox) applied(ctx context.Context) (int, error) {
	var n int
	err := in.db.QueryRowContext(ctx, `SELECT COUNT(*) FROM journal`).Scan(&n)
	return n, err
}

// report is what the inbox holds, for the check.
type report struct {
	applied     int              // effects in the journal
	twice       []string         // "key#seq" applied more than once
	balances    map[string]int64 // by key
	redelivered int              // deliveries found applied already
}

func (in *inbox) report(ctx context.Context) (report, error) {
	rep := report{balances: map[string]int64{}}
	if err := in.db.QueryRowContext(ctx, `SELECT COUNT(*) FROM journal`).Scan(&rep.applied); err != nil {
		return rep, err
	}
	if err := in.db.QueryRowContext(ctx, `SELECT COALESCE((SELECT n FROM counters WHERE name = 'redelivered'), 0)`).Scan(&rep.redelivered); err != nil {
		return rep, err
	}
	rows, err := in.db.QueryContext(ctx, `SELECT key, seq, COUNT(*) FROM journal GROUP BY key, producer, seq HAVING COUNT(*) > 1 ORDER BY key, seq`)
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
	rows, err = in.db.QueryContext(ctx, `SELECT key, balance FROM accounts`)
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

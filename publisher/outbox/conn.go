package outbox

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"strconv"
	"strings"
	"time"
)

// A keptConn is the connection a run keeps for its writes from one to
// the next (exec).
//
// On PostgreSQL it is the deletes', which run beside Run: beside the
// loop's own statements and a writer's, a delete is a third connection at
// once, over database/sql's default of 2 idle ones, and the pool would
// otherwise close one and open one, a server process and its handshake,
// delete after delete.
//
// On SQLite it is the marks' and the deletes', both in Run's turn, and it
// waits for the write lock in steps of its own: SQLite's busy handler
// sleeps 1, 2, 5, 10, 15 ms... between tries, so that a mark behind a
// stream of writers' commits waited 10 to 35 ms for a lock free most of
// that time. The connection's busy_timeout is 0 while the run keeps it,
// and exec tries again every 50 µs to 1 ms, within the busy_timeout the
// application set.
//
// None is kept on a pool bounded by SetMaxOpenConns, which its
// application sized; a statement that fails gives the connection back,
// and the next takes another.
type keptConn struct {
	c    *sql.Conn
	busy time.Duration // SQLite: the application's busy_timeout, restored at giveBack
}

// busyStep bounds the waits between a SQLite write's tries.
const busyStep = time.Millisecond

// A querier is what a statement runs on: the pool, or a connection.
type querier interface {
	ExecContext(ctx context.Context, q string, args ...any) (sql.Result, error)
	QueryContext(ctx context.Context, q string, args ...any) (*sql.Rows, error)
}

// exec runs a write on the run's kept connection (see keptConn).
func (ru *run) exec(ctx context.Context, q string, args ...any) (sql.Result, error) {
	var res sql.Result
	err := ru.write(ctx, func(c querier) error {
		var err error
		res, err = c.ExecContext(ctx, q, args...)
		return err
	})
	return res, err
}

// write runs f, one write statement, on the run's kept connection (see
// keptConn), or on the pool if it keeps none; on SQLite, again while the
// database is locked, within the application's busy_timeout.
func (ru *run) write(ctx context.Context, f func(querier) error) error {
	o := ru.r.o
	if ru.conn.c == nil && o.db.Stats().MaxOpenConnections == 0 {
		if err := ru.conn.take(ctx, o.db, o.d); err != nil {
			return err
		}
	}
	if ru.conn.c == nil {
		return f(o.db)
	}
	err := f(ru.conn.c)
	if o.d == SQLite {
		deadline := time.Now().Add(ru.conn.busy)
		for wait := 50 * time.Microsecond; err != nil && locked(err) && time.Now().Before(deadline); wait = min(2*wait, busyStep) {
			t := time.NewTimer(wait)
			select {
			case <-t.C:
			case <-ctx.Done():
				t.Stop()
				return ctx.Err()
			}
			err = f(ru.conn.c)
		}
	}
	if err != nil {
		ru.conn.giveBack()
	}
	return err
}

// markWrite runs a mark: on SQLite on the kept connection, on PostgreSQL
// on any, the kept one being the deletes' beside Run.
func (ru *run) markWrite(ctx context.Context, f func(querier) error) error {
	if ru.r.o.d == SQLite {
		return ru.write(ctx, f)
	}
	return f(ru.r.o.db)
}

// take takes a connection from db to keep; on SQLite, with busy_timeout 0.
func (k *keptConn) take(ctx context.Context, db *sql.DB, d Dialect) error {
	c, err := db.Conn(ctx)
	if err != nil {
		return err
	}
	if d == SQLite {
		var ms int64
		if err := c.QueryRowContext(ctx, `PRAGMA busy_timeout`).Scan(&ms); err != nil {
			_ = c.Close()
			return err
		}
		if _, err := c.ExecContext(ctx, `PRAGMA busy_timeout = 0`); err != nil {
			_ = c.Close()
			return err
		}
		k.busy = time.Duration(ms) * time.Millisecond
	}
	k.c = c
	return nil
}

// giveBack gives the kept connection back to the pool, with its
// busy_timeout as it was; one whose setting cannot be restored is closed.
func (k *keptConn) giveBack() {
	if k.c == nil {
		return
	}
	if k.busy > 0 {
		ctx, cancel := context.WithTimeout(context.Background(), stmtTimeout)
		if _, err := k.c.ExecContext(ctx, `PRAGMA busy_timeout = `+strconv.FormatInt(k.busy.Milliseconds(), 10)); err != nil {
			_ = k.c.Raw(func(any) error { return driver.ErrBadConn })
		}
		cancel()
	}
	_ = k.c.Close()
	k.c, k.busy = nil, 0
}

// locked reports whether err is SQLite's "database is locked"
// (SQLITE_BUSY), as its drivers word it.
func locked(err error) bool {
	s := err.Error()
	return strings.Contains(s, "SQLITE_BUSY") || strings.Contains(s, "database is locked")
}

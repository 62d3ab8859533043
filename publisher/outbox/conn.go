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
	sync int           // SQLite: the application's synchronous, if FULL or EXTRA (2, 3) in WAL mode, restored at giveBack; 0 if unchanged
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

// take takes a connection from db to keep; on SQLite, with busy_timeout
// 0, and in WAL mode with synchronous NORMAL if it was FULL or EXTRA: the
// relay's marks and deletes then commit without a sync of the WAL, which
// the application's next commit of FULL syncs with it (a power cut may
// undo the last of them: their events are sent again, copies). WAL with
// NORMAL is what SQLite's documentation calls safe from corruption.
func (k *keptConn) take(ctx context.Context, db *sql.DB, d Dialect) error {
	c, err := db.Conn(ctx)
	if err != nil {
		return err
	}
	if d == SQLite {
		var ms int64
		var mode string
		var sync int
		err := c.QueryRowContext(ctx, `PRAGMA busy_timeout`).Scan(&ms)
		if err == nil {
			err = c.QueryRowContext(ctx, `PRAGMA journal_mode`).Scan(&mode)
		}
		if err == nil {
			err = c.QueryRowContext(ctx, `PRAGMA synchronous`).Scan(&sync)
		}
		if err == nil {
			k.busy = time.Duration(ms) * time.Millisecond
			_, err = c.ExecContext(ctx, `PRAGMA busy_timeout = 0`)
		}
		if err == nil && strings.EqualFold(mode, "wal") && sync > 1 {
			k.sync = sync
			_, err = c.ExecContext(ctx, `PRAGMA synchronous = NORMAL`)
		}
		if err != nil {
			k.restore(c)
			k.busy, k.sync = 0, 0
			return err
		}
	}
	k.c = c
	return nil
}

// giveBack gives the kept connection back to the pool, with its settings
// as they were.
func (k *keptConn) giveBack() {
	if k.c == nil {
		return
	}
	k.restore(k.c)
	k.c, k.busy, k.sync = nil, 0, 0
}

// restore gives c back to the pool with the settings k changed as they
// were; one whose settings cannot be restored is closed.
func (k *keptConn) restore(c *sql.Conn) {
	ctx, cancel := context.WithTimeout(context.Background(), stmtTimeout)
	defer cancel()
	var err error
	if k.sync > 0 {
		_, err = c.ExecContext(ctx, `PRAGMA synchronous = `+strconv.Itoa(k.sync))
	}
	if k.busy > 0 && err == nil {
		_, err = c.ExecContext(ctx, `PRAGMA busy_timeout = `+strconv.FormatInt(k.busy.Milliseconds(), 10))
	}
	if err != nil {
		_ = c.Raw(func(any) error { return driver.ErrBadConn })
	}
	_ = c.Close()
}

// locked reports whether err is SQLite's "database is locked"
// (SQLITE_BUSY), as its drivers word it.
func locked(err error) bool {
	s := err.Error()
	return strings.Contains(s, "SQLITE_BUSY") || strings.Contains(s, "database is locked")
}

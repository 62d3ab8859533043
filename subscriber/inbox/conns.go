package inbox

import (
	"context"
	"database/sql"
	"sync"
	"time"
)

// holdFor is how long the inbox keeps a connection it took from the pool
// before it gives it back: long enough that a message costs no connection
// of its own, short enough that the pool's own rules for its connections
// (sql.DB.SetConnMaxLifetime, SetConnMaxIdleTime) still apply within a
// minute.
const holdFor = time.Minute

// conns keeps the connections of the inbox's transactions from one
// message to the next. database/sql keeps 2 idle connections by default,
// so with more handler calls at once than that, a pool left at its
// defaults closes a connection after one message and opens another for
// the next: on PostgreSQL, a new server process and its handshake each
// time. The inbox keeps, instead, one connection for each call that ran
// at once (a *sql.Conn taken from the pool), the last used first, and
// gives each back to the pool (sql.Conn.Close) once it has held it for
// holdFor, once a transaction on it ended otherwise than cleanly, and
// when the inbox closes. A pool whose open connections are bounded
// (sql.DB.SetMaxOpenConns) has been sized by its application, which may
// need every one of them: there, the inbox holds no connection between
// calls.
type conns struct {
	db     *sql.DB
	mu     sync.Mutex
	free   []held // the last one put is the first taken
	closed bool
}

// held is a connection the inbox keeps, and when it took it.
type held struct {
	c     *sql.Conn
	taken time.Time
}

// begin begins a transaction on a connection kept, or on one taken from
// the pool. A kept connection that fails to begin one (a server
// restarted, a connection cut while it was idle) is given back, and the
// next one tried, down to a new one from the pool, whose error is
// returned: nothing of the message has run yet, and the pool checks a
// connection idle for over a second before it lends it (pgx pings it),
// where the inbox's would otherwise fail the message. end gives
// the connection back to the keeper once the transaction is over: clean
// says it ended cleanly, committed or rolled back without an error.
func (cs *conns) begin(ctx context.Context) (tx *sql.Tx, end func(clean bool), err error) {
	for {
		h, kept, err := cs.take(ctx)
		if err != nil {
			return nil, nil, err
		}
		tx, err := h.c.BeginTx(ctx, nil)
		if err == nil {
			return tx, func(clean bool) { cs.put(h, clean && ctx.Err() == nil) }, nil
		}
		_ = h.c.Close()
		if !kept || ctx.Err() != nil {
			return nil, nil, err
		}
	}
}

// take returns the connection put last, or a new one from the pool, and
// whether it was kept.
func (cs *conns) take(ctx context.Context) (held, bool, error) {
	cs.mu.Lock()
	if n := len(cs.free); n > 0 {
		h := cs.free[n-1]
		cs.free = cs.free[:n-1]
		cs.mu.Unlock()
		return h, true, nil
	}
	cs.mu.Unlock()
	c, err := cs.db.Conn(ctx)
	return held{c: c, taken: time.Now()}, false, err
}

// put keeps h for the next call, or gives it back to the pool: when its
// transaction did not end cleanly, when it has been held for holdFor,
// when the pool is bounded, and once the inbox is closed. It gives back
// too the connections kept that have been held for holdFor.
func (cs *conns) put(h held, keep bool) {
	now := time.Now()
	keep = keep && now.Sub(h.taken) < holdFor && cs.db.Stats().MaxOpenConnections == 0
	var out []held
	cs.mu.Lock()
	if keep && !cs.closed {
		cs.free = append(cs.free, h)
	} else {
		out = append(out, h)
	}
	kept := cs.free[:0]
	for _, f := range cs.free {
		if now.Sub(f.taken) >= holdFor {
			out = append(out, f)
		} else {
			kept = append(kept, f)
		}
	}
	clear(cs.free[len(kept):])
	cs.free = kept
	cs.mu.Unlock()
	for _, h := range out {
		_ = h.c.Close()
	}
}

// close gives every connection kept back to the pool; those of calls
// still running go back as their calls end.
func (cs *conns) close() {
	cs.mu.Lock()
	out := cs.free
	cs.free, cs.closed = nil, true
	cs.mu.Unlock()
	for _, h := range out {
		_ = h.c.Close()
	}
}

package inbox_test

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/keyorder/keyorder/subscriber/inbox"
)

// TestKeepsConnections: with the pool at database/sql's defaults (2 idle
// connections), 8 handler calls at once, message after message, open no
// connection per message: the inbox keeps its connections between
// messages, and Close gives them back to the pool. Before, the pool
// closed a connection after most messages and opened one for the next.
func TestKeepsConnections(t *testing.T) {
	eachDatabase(t, func(t *testing.T, db database) {
		ctx := timeout(t, 60e9)
		one, _ := db.open(t)
		in := newInbox(t, one, db.dialect)
		h := in.Handler(record(db.dialect))
		const calls, each = 8, 25
		start := make(chan struct{})
		errs := make(chan error, calls*each)
		var wg sync.WaitGroup
		for c := range calls {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				for n := range each {
					errs <- h(ctx, delivery(fmt.Sprintf("k%d", c), "p", uint32(n+1)))
				}
			}()
		}
		close(start)
		wg.Wait()
		close(errs)
		for err := range errs {
			require.NoError(t, err)
		}
		st := one.Stats()
		assert.Zero(t, st.MaxIdleClosed, "connections closed by the pool's idle bound while messages ran")
		assert.LessOrEqual(t, st.OpenConnections, calls+1, "a connection per call at most, and New's")
		require.NoError(t, in.Close())
		assert.Zero(t, one.Stats().InUse, "Close gives the kept connections back")
		times, _ := applied(t, one)
		assert.Len(t, times, calls*each)
	})
}

// TestBoundedPoolKeepsNone: on a pool the application bounded to one
// connection, the inbox keeps none between messages, so that the
// application's own statements are not kept waiting for it.
func TestBoundedPoolKeepsNone(t *testing.T) {
	eachDatabase(t, func(t *testing.T, db database) {
		ctx := timeout(t, 30e9)
		one, _ := db.open(t)
		one.SetMaxOpenConns(1)
		in := newInbox(t, one, db.dialect)
		h := in.Handler(record(db.dialect))
		require.NoError(t, h(ctx, delivery("k", "p", 1)))
		var n int
		require.NoError(t, one.QueryRowContext(ctx, `SELECT count(*) FROM effects`).Scan(&n), "the pool's one connection is free")
		assert.Equal(t, 1, n)
		require.NoError(t, h(ctx, delivery("k", "p", 2)))
		require.NoError(t, in.Close())
	})
}

// TestBrokenConnectionReplaced: a kept connection whose server process
// ended while it was idle costs the next message nothing: its
// transaction begins on a new connection, as the pool's own would.
func TestBrokenConnectionReplaced(t *testing.T) {
	for _, db := range databases {
		if db.dialect != inbox.PostgreSQL {
			continue
		}
		ctx := timeout(t, 30e9)
		one, other := db.open(t)
		in := newInbox(t, one, db.dialect)
		h := in.Handler(record(db.dialect))
		require.NoError(t, h(ctx, delivery("k", "p", 1)))
		var ended int
		require.NoError(t, other.QueryRowContext(ctx, `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
			WHERE pid <> pg_backend_pid() AND datname = current_database() AND backend_type = 'client backend'`).Scan(&ended))
		require.Positive(t, ended)
		require.NoError(t, h(context.WithoutCancel(ctx), delivery("k", "p", 2)), "the message is applied on a new connection")
		times, _ := applied(t, other)
		assert.Equal(t, map[string]int{"k/0.1": 1, "k/0.2": 1}, times)
		require.NoError(t, in.Close())
	}
}

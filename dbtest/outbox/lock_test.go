package outbox_test

import (
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/keyorder/keyorder/dbtest/sqlitetest"
	"github.com/keyorder/keyorder/internal/harness"
	"github.com/keyorder/keyorder/publisher/outbox"
)

// TestRelayWaitsForTheWriteLock: on SQLite a relay keeps a connection for
// its marks and deletes with busy_timeout 0 and waits for the write lock
// in steps of its own. A writer commits events, then holds the write lock
// for a while, so that the relay's mark of those events finds the lock
// taken: the relay waits, without a database error, publishes them once
// the lock is free, and when Run returns every connection of the pool has
// the application's busy_timeout again.
func TestRelayWaitsForTheWriteLock(t *testing.T) {
	t.Parallel()
	ctx := harness.Context(t, testTimeout)
	db, e := sqlitetest.Open(t), newEnv(t)
	db.SetMaxIdleConns(10) // so that the pool keeps what the relay gives back
	ob := newOutbox(t, ctx, db, kinds[0])
	// The writer's outbox is another value on the same database, so that
	// its Add does not wake the relay within the process: the relay finds
	// the events by its poll.
	writer := newOutbox(t, ctx, db, kinds[0])
	var logs harness.Buffer
	r, err := outbox.NewRelay(ob, e.publisher(t), outbox.WithPollInterval(20*time.Millisecond),
		outbox.WithLogger(slog.New(slog.NewJSONHandler(&logs, nil))))
	require.NoError(t, err)
	stop := runRelay(t, r)
	waitFor(t, e, "the relay's shards", func() bool { return r.Stats().Shards == ob.Shards() })

	for round := range 3 {
		data := make([]string, 50)
		for i := range data {
			data[i] = fmt.Sprintf("r%d-%d", round, i)
		}
		add(t, ctx, db, writer, "k", data...)
		hold, err := db.BeginTx(ctx, nil) // the DSN's _txlock=immediate: the write lock, now
		require.NoError(t, err)
		_, err = hold.ExecContext(ctx, `INSERT INTO keyorder_outbox_meta (name, value) VALUES ('held', 'x')`)
		require.NoError(t, err)
		// A hold, not a synchronisation: several of the relay's polls
		// fall within it, whatever the relay does meanwhile.
		time.Sleep(150 * time.Millisecond)
		require.NoError(t, hold.Rollback())
		waitFor(t, e, "the round published", func() bool { return len(e.view(t, ob.Producer()).firsts["k"]) == 50*(round+1) })
	}
	stop()
	v := e.view(t, ob.Producer())
	assert.Empty(t, v.disorder)
	assert.Zero(t, v.copies)
	assert.NotContains(t, logs.String(), "database error", "the relay waited for the lock")

	// Every connection open, each taken in turn and held, so that none is
	// taken twice: the kept one was given back with its busy_timeout.
	open := db.Stats().OpenConnections
	require.Positive(t, open)
	for range open {
		c, err := db.Conn(ctx)
		require.NoError(t, err)
		defer c.Close()
		var ms int
		require.NoError(t, c.QueryRowContext(ctx, `PRAGMA busy_timeout`).Scan(&ms))
		assert.Equal(t, 20000, ms, "busy_timeout as the DSN sets it")
	}
	assert.True(t, strings.Contains(sqlitetest.DSN("x"), "busy_timeout(20000)"), "the DSN this test assumes")
}

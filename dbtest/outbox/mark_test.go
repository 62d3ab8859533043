package outbox_test

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/keyorder/keyorder/internal/harness"
	"github.com/keyorder/keyorder/ordering/orderingtest"
	"github.com/keyorder/keyorder/publisher/outbox"
)

// TestMarkIsARowAKey: a relay marks what it sends in one row a key of the
// sent table, raised to the last number of the run, and writes nothing
// in the events' rows: a count in each event's row cost both databases
// about 2 µs an event. Held at the service, a's events are marked
// before they are taken; once they are, everything arrives in order, and
// nothing counts as sent again.
func TestMarkIsARowAKey(t *testing.T) {
	t.Parallel()
	eachDB(t, func(t *testing.T, k dbKind) {
		t.Parallel()
		ctx := harness.Context(t, testTimeout)
		db, e := k.open(t), newEnv(t)
		ob := newOutbox(t, ctx, db, k)
		hold := e.srv.HoldPublish(orderingtest.Key("a"))
		r, err := outbox.NewRelay(ob, e.publisher(t), outbox.WithLogger(quiet))
		require.NoError(t, err)
		runRelay(t, r)
		var data []string
		for i := 1; i <= 30; i++ {
			data = append(data, fmt.Sprintf("a%d", i))
		}
		add(t, ctx, db, ob, "a", data...)
		add(t, ctx, db, ob, "b", "b1", "b2")
		require.NoError(t, hold.Wait(ctx, 1))
		waitFor(t, e, "a's events marked up to 30", func() bool {
			var upto int64
			err := db.QueryRowContext(ctx, `SELECT upto FROM keyorder_outbox_sent WHERE key = 'a'`).Scan(&upto)
			return err == nil && upto == 30
		})
		var counted int
		require.NoError(t, db.QueryRowContext(ctx, `SELECT COUNT(*) FROM keyorder_outbox WHERE sent > 0`).Scan(&counted))
		assert.Zero(t, counted, "no event's own row is written by the mark")
		hold.Remove()
		waitFor(t, e, "the outbox to empty", func() bool { return pending(t, db) == 0 })
		v := e.view(t, ob.Producer())
		assert.Equal(t, map[string][]string{"a": data, "b": {"b1", "b2"}}, v.firsts)
		assert.Empty(t, v.disorder)
		assert.Zero(t, r.Stats().Resent)
		var b int64
		require.NoError(t, db.QueryRowContext(ctx, `SELECT upto FROM keyorder_outbox_sent WHERE key = 'b'`).Scan(&b))
		assert.EqualValues(t, 2, b)
	})
}

// TestEarlierVersionsMarks: an event whose own count is above 0, as a
// relay of an earlier version left it (it marked each event, and died
// before its delete), is taken for sent: a relay sends it again, counted
// as a re-send, then the events after it, in order.
func TestEarlierVersionsMarks(t *testing.T) {
	t.Parallel()
	eachDB(t, func(t *testing.T, k dbKind) {
		t.Parallel()
		ctx := harness.Context(t, testTimeout)
		db, e := k.open(t), newEnv(t)
		ob := newOutbox(t, ctx, db, k)
		add(t, ctx, db, ob, "a", "a1", "a2", "a3")
		execQ(t, db, k, `UPDATE keyorder_outbox SET sent = 1 WHERE key = 'a' AND seq <= 2`)
		r, err := outbox.NewRelay(ob, e.publisher(t), outbox.WithLogger(quiet))
		require.NoError(t, err)
		runRelay(t, r)
		waitFor(t, e, "the outbox to empty", func() bool { return pending(t, db) == 0 })
		assert.Equal(t, map[string][]string{"a": {"a1", "a2", "a3"}}, e.view(t, ob.Producer()).firsts)
		assert.EqualValues(t, 2, r.Stats().Resent, "a1 and a2 were sent before")
	})
}

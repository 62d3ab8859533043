package outbox_test

import (
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/keyorder/keyorder/internal/harness"
	"github.com/keyorder/keyorder/ordering/orderingtest"
	"github.com/keyorder/keyorder/publisher"
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
		ctx, db, e, ob := setUp(t, k)
		hold := e.srv.HoldPublish(orderingtest.Key("a"))
		r := startRelay(t, ob, e)
		data := numbered("a", 30)
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

// TestDeleteWaitsAPollAtMost: a relay puts off deleting what the service
// took in a burst (a page of events or more in flight), so that the
// publishes go first, but a poll interval at most: with a's publish held
// (two events, pages of one), b's events, taken, are deleted all the
// same, and a's stay. Released, a's arrive, in order, and the outbox
// empties, with nothing sent twice.
func TestDeleteWaitsAPollAtMost(t *testing.T) {
	t.Parallel()
	eachDB(t, func(t *testing.T, k dbKind) {
		t.Parallel()
		ctx, db, e, ob := setUp(t, k)
		hold := e.srv.HoldPublish(orderingtest.Key("a"))
		r, err := outbox.NewRelay(ob, e.publisher(t), outbox.WithLogger(quiet),
			outbox.WithBatchSize(1), outbox.WithPollInterval(20*time.Millisecond))
		require.NoError(t, err)
		runRelay(t, r)
		add(t, ctx, db, ob, "a", "a1", "a2")
		require.NoError(t, hold.Wait(ctx, 1))
		add(t, ctx, db, ob, "b", "b1", "b2")
		waitFor(t, e, "b's events deleted while a's are held", func() bool { return pending(t, db) == 2 })
		var held int
		require.NoError(t, db.QueryRowContext(ctx, `SELECT COUNT(*) FROM keyorder_outbox WHERE key = 'a'`).Scan(&held))
		assert.Equal(t, 2, held, "a's events stay while in flight")
		hold.Remove()
		allOnceInOrder(t, e, db, ob, r, map[string][]string{"a": {"a1", "a2"}, "b": {"b1", "b2"}})
		assert.Zero(t, r.Stats().Resent)
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
		ctx, db, e, ob := setUp(t, k)
		add(t, ctx, db, ob, "a", "a1", "a2", "a3")
		execQ(t, db, k, `UPDATE keyorder_outbox SET sent = 1 WHERE key = 'a' AND seq <= 2`)
		r := startRelay(t, ob, e)
		waitFor(t, e, "the outbox to empty", func() bool { return pending(t, db) == 0 })
		assert.Equal(t, map[string][]string{"a": {"a1", "a2", "a3"}}, e.view(t, ob.Producer()).firsts)
		assert.EqualValues(t, 2, r.Stats().Resent, "a1 and a2 were sent before")
	})
}

// TestManyKeysInFlight: with 1,000 keys held at the service, each key's
// second event goes out behind its first, marked and handed over while
// the first is in flight; a read of the steady shards leaves out what is
// in flight, so that nothing is sent twice; released, everything arrives
// in order.
func TestManyKeysInFlight(t *testing.T) {
	t.Parallel()
	eachDB(t, func(t *testing.T, k dbKind) {
		t.Parallel()
		ctx, db, e, ob := setUp(t, k)
		const keys = 1000
		hold := e.srv.HoldPublish(orderingtest.AnyMessage)
		r := startRelay(t, ob, e)
		key := func(i int) string { return fmt.Sprintf("k%04d", i) }
		addAll := func(n int) {
			tx, err := db.BeginTx(ctx, nil)
			require.NoError(t, err)
			for i := range keys {
				require.NoError(t, ob.Add(ctx, tx, key(i), &publisher.Message{Data: fmt.Appendf(nil, "%s-%d", key(i), n)}))
			}
			require.NoError(t, tx.Commit())
		}
		addAll(1)
		waitFor(t, e, "every key marked", func() bool {
			var n int
			require.NoError(t, db.QueryRowContext(ctx, `SELECT COUNT(*) FROM keyorder_outbox_sent`).Scan(&n))
			return n == keys
		})
		addAll(2)
		waitFor(t, e, "every key's second event marked", func() bool {
			var n int
			require.NoError(t, db.QueryRowContext(ctx, `SELECT COUNT(*) FROM keyorder_outbox_sent WHERE upto = 2`).Scan(&n))
			return n == keys
		})
		hold.Remove()
		waitFor(t, e, "the outbox to empty", func() bool { return pending(t, db) == 0 })
		v := e.view(t, ob.Producer())
		assert.Len(t, v.firsts, keys)
		for i := range keys {
			require.Equal(t, []string{key(i) + "-1", key(i) + "-2"}, v.firsts[key(i)])
		}
		assert.Zero(t, v.copies)
		assert.Zero(t, r.Stats().Resent)
	})
}

// TestReadLeavesOutWhatIsInFlight: while a's 50 events are held at the
// service, in flight, the relay's reads for b's event that follows give
// b's event alone, once: a read does not take what is in flight again,
// whose cost would grow with what is in flight at every commit.
// Released, everything arrives in order, and nothing was sent twice.
func TestReadLeavesOutWhatIsInFlight(t *testing.T) {
	t.Parallel()
	eachDB(t, func(t *testing.T, k dbKind) {
		t.Parallel()
		ctx := harness.Context(t, testTimeout)
		var rows atomic.Int64
		db := openHooked(t, k, k.dsn(t), hooks{row: func(q string) {
			if strings.HasPrefix(q, pageRead) {
				rows.Add(1)
			}
		}})
		ob := newOutbox(t, ctx, db, k)
		e := newEnv(t)
		hold := e.srv.HoldPublish(orderingtest.Key("a"))
		r := startRelay(t, ob, e)
		data := numbered("a", 50)
		add(t, ctx, db, ob, "a", data...)
		require.NoError(t, hold.Wait(ctx, 1))
		read := rows.Load()
		require.GreaterOrEqual(t, read, int64(50), "a's events were read")
		add(t, ctx, db, ob, "b", "b1")
		waitFor(t, e, "b1 taken", func() bool { return r.Stats().Published == 1 })
		assert.EqualValues(t, 1, rows.Load()-read, "rows read after a's were in flight: b1's alone")
		hold.Remove()
		allOnceInOrder(t, e, db, ob, r, map[string][]string{"a": data, "b": {"b1"}})
		assert.Zero(t, r.Stats().Resent)
	})
}

// TestMarkAndDeleteTakeAnyKey: the mark and the delete name each key in
// their table of keys (JSON on PostgreSQL, a VALUES list on SQLite), so
// a key of quotes, backslashes, braces or letters beyond ASCII is marked
// under its own name, and its events published in order and deleted.
func TestMarkAndDeleteTakeAnyKey(t *testing.T) {
	t.Parallel()
	eachDB(t, func(t *testing.T, k dbKind) {
		t.Parallel()
		ctx, db, e, ob := setUp(t, k)
		keys := []string{`q"uote`, `back\slash`, `{"key":"x"}`, `'single'`, "<&>", "ünïcödé/ключ", "🔑\u2028"}
		want := map[string][]string{}
		for i, key := range keys {
			want[key] = numbered(fmt.Sprintf("k%d-", i), 3)
			add(t, ctx, db, ob, key, want[key]...)
		}
		r := startRelay(t, ob, e)
		allOnceInOrder(t, e, db, ob, r, want)
		assert.Zero(t, r.Stats().Resent)
		for _, key := range keys {
			var upto int64
			require.NoError(t, db.QueryRowContext(ctx, k.dialect.Rebind(`SELECT upto FROM keyorder_outbox_sent WHERE key = ?`), key).Scan(&upto), key)
			assert.EqualValues(t, 3, upto, key)
		}
	})
}

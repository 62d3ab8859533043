package outbox_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/keyorder/keyorder/ordering"
	"github.com/keyorder/keyorder/publisher/outbox"
)

// TestUntakenEventsGoFirst writes by hand, under a relay that has read
// its shards once, what another relay leaves when its run fails or it
// dies unknown to this one: an event marked sent and not taken. A later
// event of the key, unsent, must not go before it (nor, taken, delete
// it); and one with no later event must not stay: both are published, in
// number order, within a lease round.
func TestUntakenEventsGoFirst(t *testing.T) {
	t.Parallel()
	eachDB(t, func(t *testing.T, k dbKind) {
		t.Parallel()
		ctx, db, e, ob := setUp(t, k)
		r, err := outbox.NewRelay(ob, e.publisher(t), outbox.WithLogger(quiet), outbox.WithLease(300*time.Millisecond))
		require.NoError(t, err)
		runRelay(t, r)
		add(t, ctx, db, ob, "k", "k1")
		add(t, ctx, db, ob, "j", "j1")
		waitFor(t, e, "the first events published", func() bool { return len(e.srv.Messages(e.topic)) == 2 })
		waitFor(t, e, "the first events deleted", func() bool { return pending(t, db) == 0 })

		// Number 2 of each key, sent once by someone else and not taken.
		for _, key := range []string{"k", "j"} {
			execQ(t, db, k, `INSERT INTO keyorder_outbox (key, seq, shard, data, headers, created, sent) VALUES (?, 2, ?, ?, '', 0, 1)`,
				key, ordering.Partition(key, ob.Shards()), []byte(key+"2"))
			execQ(t, db, k, `UPDATE keyorder_outbox_keys SET last = 2 WHERE key = ?`, key)
		}
		add(t, ctx, db, ob, "k", "k3") // unsent: read at once, and behind 2

		waitFor(t, e, "every event published", func() bool {
			v := e.view(t, ob.Producer())
			return len(v.firsts["k"])+len(v.firsts["j"])+len(v.disorder) >= 5 || len(v.disorder) > 0
		})
		v := e.view(t, ob.Producer())
		assert.Empty(t, v.disorder)
		assert.Equal(t, []string{"k1", "k2", "k3"}, v.firsts["k"])
		assert.Equal(t, []string{"j1", "j2"}, v.firsts["j"])
		waitFor(t, e, "every event deleted", func() bool { return pending(t, db) == 0 })
	})
}

package outbox_test

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
)

// TestRelayPublishesInOrder is the happy path: events of several keys,
// committed in several transactions, reach the topic once each, in commit
// order per key, stamped as the outbox, and leave the outbox.
func TestRelayPublishesInOrder(t *testing.T) {
	t.Parallel()
	eachDB(t, func(t *testing.T, k dbKind) {
		t.Parallel()
		ctx, db, e, ob := setUp(t, k)
		want := map[string][]string{}
		for i := range 20 {
			key := fmt.Sprintf("k%d", i%5)
			d := fmt.Sprintf("%s-%d", key, i)
			add(t, ctx, db, ob, key, d, d+"b")
			want[key] = append(want[key], d, d+"b")
		}
		r := startRelay(t, ob, e)
		waitFor(t, e, "the outbox to empty", func() bool { return pending(t, db) == 0 })
		v := e.view(t, ob.Producer())
		assert.Empty(t, v.disorder)
		assert.Equal(t, want, v.firsts)
		assert.Zero(t, v.copies)
		assert.EqualValues(t, 40, r.Stats().Published)
	})
}

package outbox_test

import (
	"log/slog"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"

	"github.com/keyorder/keyorder/internal/metrictest"
	"github.com/keyorder/keyorder/ordering/orderingtest"
	"github.com/keyorder/keyorder/publisher/outbox"
)

// TestRelayMetrics checks the relay's instruments: published, re-sent
// and failed events counted as Stats counts them, the shards held, and
// pending and lag reported while it runs, with the producer as the one
// attribute and no key.
func TestRelayMetrics(t *testing.T) {
	t.Parallel()
	eachDB(t, func(t *testing.T, k dbKind) {
		t.Parallel()
		ctx, db, e, ob := setUp(t, k)
		e.srv.LosePublishResponses(orderingtest.Key("b"), codes.FailedPrecondition, 1)
		for range 5 {
			add(t, ctx, db, ob, "a", "x")
			add(t, ctx, db, ob, "b", "y")
		}
		m := metrictest.NewMeter(t)
		r, err := outbox.NewRelay(ob, e.publisher(t), outbox.WithMeterProvider(m), outbox.WithLogger(slog.New(slog.DiscardHandler)))
		require.NoError(t, err)
		stop := runRelay(t, r)
		waitFor(t, e, "the outbox to empty", func() bool { return pending(t, db) == 0 && r.Stats().Published == 10 })

		got := m.Collect(t, "keyorder.producer", ob.Producer(), []string{"a", "b"})
		st := r.Stats()
		assert.Equal(t, float64(st.Published), got["keyorder.outbox.published"].Points[""])
		assert.Positive(t, st.Resent)
		assert.Equal(t, float64(st.Resent), got["keyorder.outbox.resent"].Points[""])
		assert.Equal(t, float64(st.Failed), got["keyorder.outbox.failed"].Points[""])
		assert.Equal(t, float64(ob.Shards()), got["keyorder.outbox.shards"].Points[""])
		assert.Contains(t, got, "keyorder.outbox.pending")
		assert.Equal(t, "s", got["keyorder.outbox.lag"].Unit)

		// Once Run has returned, the gauges are gone: a Relay has no
		// Close, and one that no longer runs leaves nothing behind.
		stop()
		got = m.Collect(t, "keyorder.producer", ob.Producer(), []string{"a", "b"})
		assert.NotContains(t, got, "keyorder.outbox.pending")
		assert.NotContains(t, got, "keyorder.outbox.shards")
		assert.Contains(t, got, "keyorder.outbox.published", "counters keep their counts")
	})
}

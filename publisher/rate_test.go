package publisher_test

import (
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/keyorder/keyorder/internal/harness"
	"github.com/keyorder/keyorder/internal/metrictest"
	"github.com/keyorder/keyorder/ordering/orderingtest"
	"github.com/keyorder/keyorder/publisher"
)

// TestHotKeyWarning publishes on the ordering-faithful fake with a clock
// the test moves, a window of 1 s and a limit of 1000 bytes, while the
// server holds the keys' requests so that their gates stay:
//
//   - "hot" publishes 20 messages of about 107 bytes within 0.2 s: one
//     warning, at its 10th message, however many more it publishes;
//   - "cool" publishes 15 such messages, one each 200 ms: about 535
//     bytes per window, never hot;
//   - once every message is done, "hot"'s gate is gone: publishing it hot
//     again is a new episode, with a new warning.
func TestHotKeyWarning(t *testing.T) {
	t.Parallel()
	m := metrictest.NewMeter(t)
	var logs metrictest.Log
	e := newFakeEnv(t)
	ctx := testContext(t)
	topic := "projects/" + harness.Project + "/topics/" + e.topic
	keys := []string{"hot", "cool"}
	hold := e.srv.HoldPublish(orderingtest.AnyMessage)
	// Without stamps, whose bytes would count too.
	p := e.newPublisher(t, []*orderingtest.Fault{hold}, publisher.WithMeterProvider(m), publisher.WithLogger(slog.New(logs.Handler())), publisher.WithoutStamps())
	var now atomic.Int64
	publisher.SetRateCheck(p, time.Second, 1000, func() time.Duration { return time.Duration(now.Load()) })

	data := make([]byte, 100)
	var rs []*publisher.Result
	pub := func(key string, at time.Duration) {
		now.Store(int64(at))
		rs = append(rs, p.Publish(ctx, &publisher.Message{Data: data}, publisher.WithOrderingKey(key)))
	}
	hot := func() []map[string]any {
		var out []map[string]any
		for _, r := range logs.Records(t) {
			if r["msg"] == "keyorder/publisher: hot key" {
				out = append(out, r)
			}
		}
		return out
	}

	for i := 0; i < 20; i++ {
		pub("hot", time.Duration(i)*10*time.Millisecond)
		if i == 8 {
			assert.Empty(t, hot(), "900 bytes or so: not yet")
		}
	}
	for i := 0; i < 15; i++ {
		pub("cool", time.Duration(i)*200*time.Millisecond)
	}
	warnings := hot()
	require.Len(t, warnings, 1, "once per episode")
	w := warnings[0]
	assert.Equal(t, "WARN", w["level"])
	assert.Equal(t, "hot", w["key"])
	assert.Equal(t, topic, w["topic"])
	assert.Greater(t, w["bytes"], 1000.0)
	assert.Equal(t, 1000.0, w["limit_bytes"])
	assert.Equal(t, map[string]float64{"": 1}, m.Collect(t, topicAttr, topic, keys)["keyorder.publisher.hot_keys"].Points)
	assert.Equal(t, "{key}", m.Collect(t, topicAttr, topic, keys)["keyorder.publisher.hot_keys"].Unit)

	// The key cools off: every message done, its gate deleted (P7).
	hold.Remove()
	for i, r := range rs {
		_, err := r.Get(ctx)
		require.NoError(t, err, "result %d", i)
	}
	gates, _ := publisher.GateState(p)
	require.Zero(t, gates)
	rs = nil
	again := e.srv.HoldPublish(orderingtest.Key("hot"))
	t.Cleanup(again.Remove) // before Close, registered earlier
	for i := 0; i < 11; i++ {
		pub("hot", 10*time.Second+time.Duration(i)*time.Millisecond)
	}
	again.Remove()
	for i, r := range rs {
		_, err := r.Get(ctx)
		require.NoError(t, err, "result %d", i)
	}
	assert.Len(t, hot(), 2, "hot again after its gate was deleted: a new episode")
	assert.Equal(t, map[string]float64{"": 2}, m.Collect(t, topicAttr, topic, keys)["keyorder.publisher.hot_keys"].Points)
	for _, r := range logs.Records(t) {
		assert.True(t, strings.HasPrefix(r["msg"].(string), "keyorder/publisher: hot key"), "nothing else logged: %v", r)
	}
}

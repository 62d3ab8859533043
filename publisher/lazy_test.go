package publisher_test

import (
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/metric/noop"

	"github.com/keyorder/keyorder/internal/metrictest"
	"github.com/keyorder/keyorder/publisher"
)

// lazyPublisher returns a publisher whose gates are lazy: no flow control
// and no duration metric, so that no watch goroutine waits for a key's
// messages unless something asks for one.
func lazyPublisher(t *testing.T, opts ...publisher.Option) *publisher.Publisher {
	e := newEnv(t, discardPublishes())
	return e.newPublisher(t, append(opts, publisher.WithMeterProvider(noop.NewMeterProvider()))...)
}

// awaitService waits, with a deadline, for the service's answer to each of
// rs, without settling them.
func awaitService(t *testing.T, rs []*publisher.Result) {
	ctx := testContext(t)
	for i, r := range rs {
		select {
		case <-publisher.OfficialReady(r):
		case <-ctx.Done():
			t.Fatalf("result %d: no answer from the service", i)
		}
	}
}

// TestLazyGateLeavesByItself checks P7 where no one looks at the Results:
// once the service has answered, the gate's timer settles the messages
// and deletes the gate, and the Results are ready with their IDs.
func TestLazyGateLeavesByItself(t *testing.T) {
	t.Parallel()
	p := lazyPublisher(t)
	ctx := testContext(t)
	var rs []*publisher.Result
	for range 3 {
		rs = append(rs, p.Publish(ctx, &publisher.Message{Data: []byte("x")}, publisher.WithOrderingKey("k")))
	}
	awaitService(t, rs)
	deadline := time.Now().Add(10 * time.Second)
	for {
		if keys, _ := publisher.GateState(p); keys == 0 {
			break
		}
		require.True(t, time.Now().Before(deadline), "the gate stayed")
		time.Sleep(5 * time.Millisecond) // polling a condition, bounded above
	}
	for i, r := range rs {
		select {
		case <-r.Ready():
		default:
			t.Fatalf("result %d not ready once its gate is gone", i)
		}
		id, err := r.Get(ctx)
		require.NoError(t, err)
		assert.NotEmpty(t, id)
	}
}

// TestHotKeyEpisodeEndsUnlooked checks that a lazy gate keeps the rate
// check's episodes: once every message of a hot key is done, the key would
// have had no gate, so publishing it hot again warns again, even when no
// one looked at the first messages' Results.
func TestHotKeyEpisodeEndsUnlooked(t *testing.T) {
	t.Parallel()
	var logs metrictest.Log
	p := lazyPublisher(t, publisher.WithLogger(slog.New(logs.Handler())), publisher.WithoutStamps())
	var now atomic.Int64
	publisher.SetRateCheck(p, time.Second, 1000, func() time.Duration { return time.Duration(now.Load()) })
	ctx := testContext(t)
	data := make([]byte, 100)
	burst := func(from time.Duration) []*publisher.Result {
		var rs []*publisher.Result
		for i := range 11 {
			now.Store(int64(from + time.Duration(i)*time.Millisecond))
			rs = append(rs, p.Publish(ctx, &publisher.Message{Data: data}, publisher.WithOrderingKey("hot")))
		}
		return rs
	}
	hot := func() int {
		n := 0
		for _, r := range logs.Records(t) {
			if r["msg"] == "keyorder/publisher: hot key" {
				n++
			}
		}
		return n
	}
	first := burst(0)
	require.Equal(t, 1, hot())
	awaitService(t, first)
	second := burst(20 * time.Millisecond)
	assert.Equal(t, 2, hot(), "a new episode once every message was done")
	for _, r := range append(first, second...) {
		_, err := r.Get(ctx)
		require.NoError(t, err)
	}
}

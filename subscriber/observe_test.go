package subscriber_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/keyorder/keyorder/internal/metrictest"
	"github.com/keyorder/keyorder/ordering/orderingtest"
	"github.com/keyorder/keyorder/subscriber"
)

// subAttr names the subscription in each data point.
const subAttr = "messaging.destination.subscription.name"

// TestObservability runs a scripted Receive on the faithful fake, with an
// SDK meter provider and a JSON logger, and checks each instrument and log
// line against what the script did: 4 keys of 10 messages; key-1/3 fails
// twice (then fails for good, holding the key), panics on its first
// redelivery, and succeeds on its second; key-0's acks are lost, so that
// its processed messages come back and are deduplicated; and the
// WithKeyEvents callback panics.
func TestObservability(t *testing.T) {
	t.Parallel()
	m := metrictest.NewMeter(t)
	var logs metrictest.Log
	keys := keyNames(4)
	const perKey = 10
	e := newFakeEnv(t, []orderingtest.Option{orderingtest.WithAckDeadline(300 * time.Millisecond)},
		subscriber.WithMeterProvider(m), subscriber.WithLogger(logs.Logger()),
		subscriber.WithMaxAttempts(2), fast,
		subscriber.WithKeyEvents(func(subscriber.KeyEvent) { panic("key event callback bug") }))
	e.publish(t, keys, perKey)
	e.srv.DropAcks(orderingtest.Key("key-0"), 3)
	tr := newTracker(keys, perKey)

	var (
		failedID  string
		whileHeld map[string]metrictest.Instrument // collected during the call after the hold
	)
	tr.receiveUntil(t, e.sub, tr.handler(func(_ context.Context, d *subscriber.Delivery) error {
		if string(d.Data) != "key-1/3" {
			return nil
		}
		failedID = d.ID // calls of a key never overlap
		switch d.Attempt {
		case 1, 2:
			return errInjected
		case 3:
			whileHeld = m.Collect(t, subAttr, e.sub.Name(), keys)
			panic("injected handler panic")
		}
		return nil
	}), func(ctx context.Context) error {
		// Wait for the lost acks to bring key-0's messages back, and for
		// the server to settle.
		return e.srv.WaitFor(ctx, func() bool {
			return e.srv.Stats(e.sub.Name()).Outstanding == 0 && e.sub.Stats().Deduplicated > 0
		})
	})

	st := e.sub.Stats()
	got := m.Collect(t, subAttr, e.sub.Name(), keys)

	t.Run("deliveries", func(t *testing.T) {
		in := got["keyorder.subscriber.deliveries"]
		assert.Equal(t, "{delivery}", in.Unit)
		assert.Equal(t, map[string]float64{
			"keyorder.outcome=acked":                                40,
			"keyorder.outcome=deduplicated":                         float64(st.Deduplicated),
			"keyorder.outcome=nacked,keyorder.reason=failed":        2,
			"keyorder.outcome=held,keyorder.reason=tail":            float64(st.NackedTail),
			"keyorder.outcome=held,keyorder.reason=hold":            float64(st.NackedHeld),
			"keyorder.outcome=nacked,keyorder.reason=shutdown":      float64(st.NackedShutdown),
			"keyorder.outcome=nacked,keyorder.reason=room":          float64(st.NackedRoom),
			"keyorder.outcome=dead_lettered,keyorder.reason=failed": 0,
		}, withZeros(in.Points, "keyorder.outcome=nacked,keyorder.reason=shutdown", "keyorder.outcome=nacked,keyorder.reason=room",
			"keyorder.outcome=held,keyorder.reason=hold", "keyorder.outcome=dead_lettered,keyorder.reason=failed"))
		// key-1/3 failed for good on two deliveries: two nacks, one
		// message.
		assert.Equal(t, int64(1), st.Failed)
		assert.Positive(t, st.Deduplicated, "key-0's processed messages came back")
		assert.Positive(t, st.NackedTail, "key-1's tail was nacked with its failed message")
	})
	t.Run("handler.duration", func(t *testing.T) {
		in := got["keyorder.subscriber.handler.duration"]
		assert.Equal(t, "s", in.Unit)
		assert.Equal(t, map[string]float64{
			"keyorder.outcome=ok":    40,
			"keyorder.outcome=error": 2,
			"keyorder.outcome=panic": 1,
		}, in.Points)
		assert.Positive(t, in.Sums["keyorder.outcome=ok"])
	})
	t.Run("gauges", func(t *testing.T) {
		require.NotNil(t, whileHeld, "collected during key-1/3's third call")
		assert.Equal(t, map[string]float64{"": 1}, whileHeld["keyorder.subscriber.held_keys"].Points, "key-1 waits on its failed message")
		assert.Equal(t, "{key}", whileHeld["keyorder.subscriber.held_keys"].Unit)
		assert.Equal(t, "s", whileHeld["keyorder.subscriber.oldest_unacked.age"].Unit)
		assert.Positive(t, whileHeld["keyorder.subscriber.oldest_unacked.age"].Points[""], "key-1/3 is running")
		assert.Contains(t, whileHeld, "keyorder.subscriber.queued")
		for _, name := range []string{"keyorder.subscriber.held_keys", "keyorder.subscriber.queued", "keyorder.subscriber.oldest_unacked.age"} {
			assert.Empty(t, got[name].Points, "%s: reported after Receive returned", name)
		}
	})
	t.Run("logs", func(t *testing.T) {
		recs := records(t, &logs, e.sub.Name())
		assert.Equal(t, 1, count(recs, "WARN", "keyorder/subscriber: key held"))
		assert.Equal(t, 1, count(recs, "INFO", "keyorder/subscriber: key released"))
		assert.Equal(t, 2, count(recs, "WARN", "keyorder/subscriber: message failed for good"))
		assert.Equal(t, 1, count(recs, "ERROR", "keyorder/subscriber: handler panicked"))
		assert.Equal(t, 2, count(recs, "DEBUG", "keyorder/subscriber: handler failed"))
		assert.Equal(t, 2, count(recs, "ERROR", "keyorder/subscriber: key event callback panicked"), "held and released")
		infoOrMore := 0
		for _, r := range recs {
			if r["level"] == "DEBUG" {
				continue
			}
			infoOrMore++
			if strings.HasPrefix(r["msg"].(string), "keyorder/subscriber: key event") {
				assert.Contains(t, r["stack"], "goroutine")
				continue
			}
			assert.Equal(t, "key-1", r["key"], "%v", r)
			assert.Equal(t, failedID, r["message_id"], "%v", r)
			switch r["msg"] {
			case "keyorder/subscriber: handler panicked":
				assert.Equal(t, "injected handler panic", r["panic"])
				assert.Contains(t, r["stack"], "goroutine")
			case "keyorder/subscriber: key released":
				assert.Equal(t, subscriber.ReasonSucceeded, r["reason"])
			case "keyorder/subscriber: message failed for good":
				want := map[float64]string{2: errInjected.Error(), 3: "injected handler panic"}[r["attempt"].(float64)]
				assert.NotEmpty(t, want, "failed for good after calls 2 and 3: %v", r)
				assert.Contains(t, r["error"], want)
			case "keyorder/subscriber: key held":
				assert.Contains(t, r["error"], errInjected.Error())
			}
		}
		assert.Equal(t, 7, infoOrMore, "nothing per message above Debug")
	})
}

// withZeros returns points with a 0 for each of names it lacks: an
// outcome that never happened has no data point.
func withZeros(points map[string]float64, names ...string) map[string]float64 {
	out := map[string]float64{}
	for k, v := range points {
		out[k] = v
	}
	for _, n := range names {
		if _, ok := out[n]; !ok {
			out[n] = 0
		}
	}
	return out
}

// TestGaugesAndHotKeys holds work in a running Receive and checks the
// gauges and the hot keys of Stats against it: "stuck" fails its first
// message, which waits an hour for its retry with 3 more behind it;
// "slow" blocks in its first call with 2 more behind it.
func TestGaugesAndHotKeys(t *testing.T) {
	t.Parallel()
	m := metrictest.NewMeter(t)
	e := newFakeEnv(t, nil, subscriber.WithMeterProvider(m), subscriber.WithLogger(slog.New(slog.DiscardHandler)),
		subscriber.WithBackoff(time.Hour, time.Hour), subscriber.WithWorkers(2))
	start := time.Now()
	e.publish(t, []string{"stuck"}, 4)
	e.publish(t, []string{"slow"}, 3)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	release := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- e.sub.Receive(ctx, func(_ context.Context, d *subscriber.Delivery) error {
			switch string(d.Data) {
			case "stuck/1":
				return errInjected
			case "slow/1":
				<-release
			}
			return nil
		})
	}()
	wctx := testContext(t)
	require.NoError(t, poll(wctx, func() bool {
		st := e.sub.Stats()
		return st.Queued == 6 && st.Running == 1 && len(st.Held) == 1
	}), "stats %+v", e.sub.Stats())

	got := m.Collect(t, subAttr, e.sub.Name(), []string{"stuck", "slow"})
	assert.Equal(t, map[string]float64{"": 1}, got["keyorder.subscriber.held_keys"].Points)
	assert.Equal(t, map[string]float64{"": 6}, got["keyorder.subscriber.queued"].Points)
	assert.Equal(t, "{delivery}", got["keyorder.subscriber.queued"].Unit)
	age := got["keyorder.subscriber.oldest_unacked.age"].Points[""]
	assert.Positive(t, age)
	assert.LessOrEqual(t, age, time.Since(start).Seconds())

	st := e.sub.Stats()
	assert.True(t, st.Receiving)
	assert.Equal(t, 2, st.Workers)
	assert.Equal(t, 2, st.Keys)
	assert.Equal(t, 2, st.ActivePartitions)
	assert.Positive(t, st.OldestAge)
	require.Len(t, st.TopBacklog, 2)
	stuck, slow := st.TopBacklog[0], st.TopBacklog[1]
	assert.Equal(t, "stuck", stuck.Key, "4 here beats 3")
	assert.Equal(t, 4, stuck.Queued, "the failed message waits at the head")
	assert.False(t, stuck.Running)
	assert.True(t, stuck.Held)
	assert.Equal(t, 1, stuck.Calls)
	assert.Equal(t, "slow", slow.Key)
	assert.Equal(t, 2, slow.Queued)
	assert.True(t, slow.Running)
	assert.Positive(t, slow.RunningFor)
	assert.Zero(t, slow.Calls, "its first call has not ended")
	require.Len(t, st.TopAge, 2)
	assert.Equal(t, st.OldestAge, st.TopAge[0].Age)
	require.Len(t, st.Partitions, 2)
	for _, p := range st.Partitions {
		assert.Equal(t, 1, p.Keys)
		switch p.Partition {
		case stuck.Partition:
			assert.Equal(t, 4, p.Queued)
		case slow.Partition:
			assert.Equal(t, 2, p.Queued)
			assert.True(t, p.Running)
		default:
			t.Errorf("partition %d has no key of the test", p.Partition)
		}
	}

	cancel()
	// Shutdown nacks what is queued, then lets slow/1 finish (S7).
	require.NoError(t, poll(wctx, func() bool { return e.sub.Stats().NackedShutdown >= 6 }))
	close(release)
	require.NoError(t, <-done)
	st = e.sub.Stats()
	assert.False(t, st.Receiving)
	assert.Zero(t, st.Keys)
	assert.Empty(t, st.TopBacklog)
	got = m.Collect(t, subAttr, e.sub.Name(), nil)
	assert.GreaterOrEqual(t, got["keyorder.subscriber.deliveries"].Points["keyorder.outcome=nacked,keyorder.reason=shutdown"], 6.0,
		"the queued deliveries were nacked at shutdown")
	assert.Equal(t, float64(st.NackedShutdown), got["keyorder.subscriber.deliveries"].Points["keyorder.outcome=nacked,keyorder.reason=shutdown"])
	assert.Equal(t, map[string]float64{"keyorder.outcome=ok": 1, "keyorder.outcome=error": 1},
		got["keyorder.subscriber.handler.duration"].Points, "slow/1 finished during the drain")
}

// TestDefaultLogger checks that Receive logs to slog.Default() as it is
// when Receive starts. It sets the default logger, so it does not run in
// parallel.
func TestDefaultLogger(t *testing.T) {
	var logs metrictest.Log
	prev := slog.Default()
	slog.SetDefault(logs.Logger())
	t.Cleanup(func() { slog.SetDefault(prev) })

	e := newFakeEnv(t, nil, subscriber.WithMaxAttempts(1), fast)
	e.publish(t, keyNames(1), 2)
	tr := newTracker(keyNames(1), 2)
	tr.receive(t, e.sub, tr.handler(func(_ context.Context, d *subscriber.Delivery) error {
		if string(d.Data) == "key-0/1" && d.Attempt == 1 {
			return subscriber.Permanent(errors.New("bad input"))
		}
		return nil
	}))
	recs := records(t, &logs, e.sub.Name())
	assert.Equal(t, 1, count(recs, "WARN", "keyorder/subscriber: key held"), "%v", recs)
	assert.Equal(t, 1, count(recs, "INFO", "keyorder/subscriber: key released"), "%v", recs)
}

package subscriber_test

import (
	"context"
	"hash/fnv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"cloud.google.com/go/pubsub/v2"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/keyorder/keyorder/ordering/orderingtest"
	"github.com/keyorder/keyorder/subscriber"
)

// TestSoak mixes every fault at once over thousands of messages and
// hundreds of keys on the faithful fake: handler errors and panics,
// permanent errors and requests to retry later, retries and nacked tails,
// lost acks, leases that run out, duplicate deliveries, forced tail
// redeliveries and broken streams. Per key, every
// message must be processed exactly once, in order, and every handler call
// must be the key's next unprocessed message.
//
// With parking, a message that fails for good parks its key instead, and
// a releaser releases the parked keys as they come, amid the same faults,
// which reach the parking subscriptions too.
func TestSoak(t *testing.T) {
	t.Parallel()
	for _, parking := range []bool{false, true} {
		t.Run(map[bool]string{false: "hold", true: "parking"}[parking], func(t *testing.T) {
			t.Parallel()
			soak(t, parking)
		})
	}
}

func soak(t *testing.T, parking bool) {
	keys, perKey := keyNames(200), 25
	if testing.Short() {
		keys, perKey = keyNames(50), 10
	}
	rs := pubsub.DefaultReceiveSettings
	rs.MaxOutstandingMessages = 400
	fopts := []orderingtest.Option{orderingtest.WithAckDeadline(2 * time.Second)}
	sopts := []subscriber.Option{subscriber.WithWorkers(8), subscriber.WithMaxAttempts(2), fast, subscriber.WithReceiveSettings(rs)}
	var e fakeEnv
	if parking {
		e = newParkEnv(t, fopts, sopts...).fakeEnv
	} else {
		e = newFakeEnv(t, fopts, sopts...)
	}
	e.publish(t, keys, perKey)
	sub := e.sub.Name()

	// Faults at the server, from the start.
	e.srv.DropAcks(orderingtest.AnyMessage, 40)
	e.srv.DuplicateDeliveries(orderingtest.AnyMessage, 150)

	tr := newTracker(keys, perKey)
	var (
		processed atomic.Int64
		breaks    sync.Map // processed counts at which streams were broken
		failures  sync.Map // "key/seq" -> handler failures so far
		stats     struct{ errors, panics, permanent, later, redelivered, slow atomic.Int64 }
	)
	total := int64(len(keys) * perKey)
	h := tr.handler(func(ctx context.Context, d *subscriber.Delivery) error {
		data := string(d.Data)
		r := roll(data)
		// About 3% of messages fail on their first 1 to 3 calls, so that
		// some recover in place and the rest are nacked with their tails.
		if r%100 < 3 {
			n, _ := failures.LoadOrStore(data, new(atomic.Int32))
			if c := n.(*atomic.Int32).Add(1); int(c) <= 1+int(r/100%3) {
				if r%7 == 0 {
					stats.panics.Add(1)
					panic("soak: injected panic")
				}
				stats.errors.Add(1)
				return errInjected
			}
		}
		// About 1% of messages are poison on their first call, and 1% ask
		// to be called again a little later on their first two calls.
		if r%100 == 10 && tr.callsOf(data) == 1 {
			stats.permanent.Add(1)
			return subscriber.Permanent(errInjected)
		}
		if r%100 == 20 && tr.callsOf(data) <= 2 {
			stats.later.Add(1)
			return subscriber.RetryAfter(5*time.Millisecond, errInjected)
		}
		// About 1% of messages make the service redeliver their key's
		// tail, acknowledged messages included, on first processing.
		if r%100 == 50 && tr.callsOf(data) == 1 {
			if _, err := e.srv.RedeliverKey(sub, d.Key); err == nil {
				stats.redelivered.Add(1)
			}
		}
		// A few handlers outlive their lease. A released message has no
		// lease on the subscription, so the wait is bounded.
		if r%1000 == 777 && tr.callsOf(data) == 1 {
			stats.slow.Add(1)
			expired := e.srv.Stats(sub).Expired
			wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			_ = e.srv.WaitFor(wctx, func() bool { return e.srv.Stats(sub).Expired > expired })
			cancel()
		}
		// Break the streams twice along the way.
		n := processed.Add(1)
		for _, at := range []int64{total / 3, 2 * total / 3} {
			if n == at {
				if _, loaded := breaks.LoadOrStore(at, true); !loaded {
					e.srv.BreakStreams(sub)
				}
			}
		}
		return nil
	})
	start := time.Now()
	var releases soakReleases
	if parking {
		stop := releases.run(e.sub, tr)
		defer stop()
	}
	tr.receiveUntil(t, e.sub, h, e.settled(nil))
	st := e.srv.Stats(sub)
	t.Logf("%d messages over %d keys in %v: %d handler errors, %d panics, %d permanent errors, %d retry-after errors, %d forced tail redeliveries, %d slow handlers, %d releases; server: %+v; subscriber: %+v",
		total, len(keys), time.Since(start).Round(time.Millisecond), stats.errors.Load(), stats.panics.Load(), stats.permanent.Load(), stats.later.Load(), stats.redelivered.Load(), stats.slow.Load(), releases.done.Load(), st, e.sub.Stats())
	if parking {
		assert.Positive(t, e.sub.Stats().Parked)
		assert.Positive(t, e.sub.Stats().Released)
		assert.Positive(t, releases.done.Load())
	}
	assert.Positive(t, stats.errors.Load())
	assert.Positive(t, stats.panics.Load())
	assert.Positive(t, stats.permanent.Load())
	assert.Positive(t, stats.later.Load())
	assert.Positive(t, stats.redelivered.Load())
	if !parking {
		assert.Positive(t, st.Nacked, "failures nacked their tails") // parking acks them
	}
	assert.Positive(t, st.Duplicated)
	assert.Positive(t, st.Expired)
	assert.GreaterOrEqual(t, st.StreamsOpened, 3)
	require.Greater(t, st.Delivered, int(total))
}

// soakReleases releases the keys the soak parks, as an operator would
// once the cause is fixed: after every handler call, and every 100 ms, it
// lists the parked keys and releases each, several at once. The ticker
// matters at the end: a key can park after the last handler call.
type soakReleases struct {
	done atomic.Int64 // releases that unparked their key
}

// run releases parked keys until the tracker is done or stop is called,
// which waits for it and for the releases it started.
func (sr *soakReleases) run(s *subscriber.Subscription, tr *tracker) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	exited := make(chan struct{})
	var (
		mu      sync.Mutex
		running = map[string]bool{}
		wg      sync.WaitGroup
	)
	release := func(key string) {
		defer wg.Done()
		if s.Release(ctx, key) == nil {
			sr.done.Add(1)
		}
		mu.Lock()
		delete(running, key)
		mu.Unlock()
	}
	go func() {
		defer close(exited)
		defer wg.Wait()
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			tr.mu.Lock()
			changed := tr.changed
			tr.mu.Unlock()
			if list, err := s.Parked(ctx); err == nil {
				mu.Lock()
				for _, k := range list {
					if !running[k.Key] {
						running[k.Key] = true
						wg.Add(1)
						go release(k.Key)
					}
				}
				mu.Unlock()
			}
			select {
			case <-changed:
			case <-tick.C:
			case <-tr.done:
				return
			case <-ctx.Done():
				return
			}
		}
	}()
	return func() { cancel(); <-exited }
}

// roll is a fixed pseudo-random number for a message, so that a failing
// run can be repeated.
func roll(data string) uint32 {
	h := fnv.New32a()
	_, _ = h.Write([]byte(data))
	return h.Sum32()
}

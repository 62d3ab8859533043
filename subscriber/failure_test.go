package subscriber_test

import (
	"context"
	"fmt"

	"errors"
	"sync"
	"testing"
	"time"

	"cloud.google.com/go/pubsub/v2"
	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/keyorder/keyorder/internal/harness"
	"github.com/keyorder/keyorder/ordering/orderingtest"
	"github.com/keyorder/keyorder/publisher"
	"github.com/keyorder/keyorder/subscriber"
)

// TestFailureHoldsKey checks S5 on the faithful fake: key-3's fifth message
// fails, twice in place then again after each redelivery, until every
// other key has finished. Every handler call must be its key's next
// unprocessed message, and the other keys must finish while key-3 is held.
func TestFailureHoldsKey(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		fail func()
	}{
		{"error", func() {}},
		{"panic", func() { panic("injected handler panic") }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			keys := keyNames(10)
			const perKey = 20
			var (
				mu       sync.Mutex
				reported []error
			)
			e := newFakeEnv(t, nil, subscriber.WithWorkers(4), subscriber.WithMaxAttempts(2), fast,
				subscriber.WithErrorHandler(func(d *subscriber.Delivery, err error) {
					mu.Lock()
					defer mu.Unlock()
					reported = append(reported, err)
				}))
			e.publish(t, keys, perKey)
			tr := newTracker(keys, perKey)
			othersDone := func() bool {
				for _, k := range keys {
					if k != "key-3" && tr.processed(k) < perKey {
						return false
					}
				}
				return true
			}
			tr.receive(t, e.sub, tr.handler(func(_ context.Context, d *subscriber.Delivery) error {
				if string(d.Data) == "key-3/5" && (tr.callsOf("key-3/5") <= 4 || !othersDone()) {
					tc.fail()
					return errInjected
				}
				return nil
			}))
			assert.GreaterOrEqual(t, tr.callsOf("key-3/5"), 5, "failed in place, then after redeliveries")
			assert.Equal(t, 1, tr.callsOf("key-3/6"), "the tail ran once, after the failed message")
			assert.Greater(t, e.srv.Stats(e.sub.Name()).Nacked, 0)

			mu.Lock()
			defer mu.Unlock()
			require.NotEmpty(t, reported)
			var pe *subscriber.PanicError
			assert.Equal(t, tc.name == "panic", errors.As(reported[0], &pe), "%v", reported[0])
		})
	}
}

// TestRetryInPlace checks that a failure that clears within the attempt
// limit never reaches the service: no nack, and Attempt counts the calls.
func TestRetryInPlace(t *testing.T) {
	t.Parallel()
	keys := keyNames(3)
	e := newFakeEnv(t, nil, subscriber.WithMaxAttempts(3), fast)
	e.publish(t, keys, 5)
	tr := newTracker(keys, 5)
	var attempts []int
	tr.receive(t, e.sub, tr.handler(func(_ context.Context, d *subscriber.Delivery) error {
		if string(d.Data) == "key-1/2" {
			attempts = append(attempts, d.Attempt)
			if d.Attempt < 3 {
				return errInjected
			}
		}
		return nil
	}))
	assert.Equal(t, []int{1, 2, 3}, attempts)
	assert.Zero(t, e.srv.Stats(e.sub.Name()).Nacked)
}

// TestRedeliveredTailsAreNotReprocessed checks S6 against each way a
// processed message comes back: the service's tail redelivery, lost acks,
// duplicate deliveries, expired leases and broken streams.
func TestRedeliveredTailsAreNotReprocessed(t *testing.T) {
	t.Parallel()
	keys := keyNames(8)
	const perKey = 30
	for _, tc := range []struct {
		name  string
		fopts []orderingtest.Option
		// before runs before Receive starts.
		before func(t *testing.T, e fakeEnv)
		// during runs once, when key-0 is a third processed.
		during func(t *testing.T, e fakeEnv)
		// slow, if set, blocks the handler of one message until it returns.
		slow func(e fakeEnv, d *subscriber.Delivery) bool
		// until must hold of the server's stats before Receive stops, so
		// that what came back has gone through Receive.
		until func(orderingtest.Stats) bool
	}{
		{
			name: "tail redelivery",
			during: func(t *testing.T, e fakeEnv) {
				n, err := e.srv.RedeliverKey(e.sub.Name(), "key-0")
				require.NoError(t, err)
				require.Positive(t, n)
			},
		},
		{
			name:  "lost acks",
			fopts: []orderingtest.Option{orderingtest.WithAckDeadline(300 * time.Millisecond)},
			before: func(t *testing.T, e fakeEnv) {
				e.srv.DropAcks(orderingtest.Key("key-1"), 5)
			},
			until: func(st orderingtest.Stats) bool { return st.Expired > 0 },
		},
		{
			name: "duplicate deliveries",
			before: func(t *testing.T, e fakeEnv) {
				e.srv.DuplicateDeliveries(orderingtest.AnyMessage, 40)
			},
			until: func(st orderingtest.Stats) bool { return st.Duplicated > 0 },
		},
		{
			name:  "expired lease",
			fopts: []orderingtest.Option{orderingtest.WithAckDeadline(200 * time.Millisecond)},
			slow: func(e fakeEnv, d *subscriber.Delivery) bool {
				return string(d.Data) == "key-2/12"
			},
			until: func(st orderingtest.Stats) bool { return st.Expired > 0 },
		},
		{
			name: "broken streams",
			during: func(t *testing.T, e fakeEnv) {
				opened := e.srv.Stats(e.sub.Name()).StreamsOpened
				require.Positive(t, e.srv.BreakStreams(e.sub.Name()))
				// Wait, on this partition only, for the client to reconnect.
				ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
				defer cancel()
				require.NoError(t, e.srv.WaitFor(ctx, func() bool { return e.srv.Stats(e.sub.Name()).StreamsOpened > opened }))
			},
			until: func(st orderingtest.Stats) bool { return st.StreamsOpened >= 2 },
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			// A small flow control window makes the service send the
			// backlog bit by bit, so faults land mid-stream.
			rs := pubsub.DefaultReceiveSettings
			rs.MaxOutstandingMessages = 20
			e := newFakeEnv(t, tc.fopts, subscriber.WithWorkers(3), fast, subscriber.WithReceiveSettings(rs))
			e.publish(t, keys, perKey)
			if tc.before != nil {
				tc.before(t, e)
			}
			tr := newTracker(keys, perKey)
			var once sync.Once
			tr.receiveUntil(t, e.sub, tr.handler(func(ctx context.Context, d *subscriber.Delivery) error {
				if tc.during != nil && string(d.Data) == "key-0/10" {
					once.Do(func() { tc.during(t, e) })
				}
				if tc.slow != nil && tc.slow(e, d) {
					// Hold the handler until the lease has run out and the
					// service has redelivered the message and its tail.
					err := e.srv.WaitFor(ctx, func() bool { return e.srv.Stats(e.sub.Name()).Expired > 0 })
					require.NoError(t, err)
				}
				return nil
			}), e.settled(tc.until))
			if tc.name != "broken streams" { // acks survive a reconnect
				assert.Greater(t, e.srv.Stats(e.sub.Name()).Delivered, len(keys)*perKey, "the service sent messages again")
			}
		})
	}
}

// TestDedupCanBeTurnedOff shows what S6 prevents: without the window, a
// redelivered tail reaches the handler again. key-0/1's ack does not
// persist, so the service still holds the key's tail once every message is
// processed, and the tail is redelivered then, when none of it is still
// here to join. The messages are stamped by the publisher: the stamps skip
// no copy either once the window is off.
func TestDedupCanBeTurnedOff(t *testing.T) {
	t.Parallel()
	keys := keyNames(1)
	e := newFakeEnv(t, nil, subscriber.WithDedupWindow(0))
	e.srv.DropAcks(orderingtest.Data("key-0/1"), 1)
	e.publish(t, keys, 10)
	var (
		mu    sync.Mutex
		calls = map[string]int{}
		all   = make(chan struct{})
	)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		done <- e.sub.Receive(ctx, func(_ context.Context, d *subscriber.Delivery) error {
			mu.Lock()
			defer mu.Unlock()
			calls[string(d.Data)]++
			if calls["key-0/10"] == 2 {
				close(all)
			}
			return nil
		})
	}()
	e.waitStats(t, "every message but key-0/1 is acked", func(st orderingtest.Stats) bool { return st.Acked == 9 })
	n, err := e.srv.RedeliverKey(e.sub.Name(), "key-0")
	require.NoError(t, err)
	require.Equal(t, 10, n)
	select {
	case <-all:
	case <-time.After(testTimeout):
		t.Fatal("the redelivered tail never reached the handler")
	}
	cancel()
	require.NoError(t, <-done)
	mu.Lock()
	defer mu.Unlock()
	for i := 1; i <= 10; i++ {
		assert.Equal(t, 2, calls[fmt.Sprintf("key-0/%d", i)], "key-0/%d", i)
	}
}

// TestUnorderedSubscriptionDoesNotHold checks S8: on an unordered
// subscription a failure does not hold its key. key-0/2 is published alone
// and fails until the rest of its key, published after its first failure,
// has succeeded; with a hold, those would be nacked for as long as key-0/2
// fails, and the test would time out.
func TestUnorderedSubscriptionDoesNotHold(t *testing.T) {
	t.Parallel()
	_, client := harness.Fake(t)
	ctx := testContext(t)
	topic, subID := names()
	createDirectly(t, client, &pubsubpb.Subscription{
		Name: path(client, "subscriptions", subID), Topic: path(client, "topics", topic),
	})
	s, err := subscriber.CreateWithTopic(ctx, client, topic, subID, subscriber.WithMaxAttempts(1))
	require.NoError(t, err)
	require.False(t, s.Ordered())
	p, err := publisher.New(client, topic)
	require.NoError(t, err)
	defer func() { require.NoError(t, p.Close(ctx)) }()
	publish := func(data string) {
		_, err := p.Publish(ctx, &publisher.Message{Data: []byte(data)}, publisher.WithOrderingKey("key-0")).Get(ctx)
		require.NoError(t, err)
	}
	publish("key-0/2")

	c := &calls{ch: make(chan struct{}, 1)}
	// succeeded signals on c.ch too: the wait below checks it after each signal.
	succeeded := &calls{ch: c.ch}
	others := func() bool {
		list := succeeded.snapshot()
		return contains(list, "key-0/3") && contains(list, "key-0/4") && contains(list, "key-0/5")
	}
	failedOnce := make(chan struct{})
	var once sync.Once
	go func() {
		<-failedOnce
		for _, d := range []string{"key-0/3", "key-0/4", "key-0/5"} {
			publish(d)
		}
	}()
	receiveWhile(t, s, c, func(_ context.Context, d *subscriber.Delivery) error {
		assert.Equal(t, "key-0", d.Headers["partition-key"], "S2 holds on unordered subscriptions too")
		c.add(d)
		if string(d.Data) == "key-0/2" && !others() {
			once.Do(func() { close(failedOnce) })
			return errInjected
		}
		succeeded.add(d)
		return nil
	}, func([]string) bool { return contains(succeeded.snapshot(), "key-0/2") })

	list := succeeded.snapshot()
	assert.Equal(t, "key-0/2", list[len(list)-1], "key-0/2 succeeded last: %v", c.snapshot())
}

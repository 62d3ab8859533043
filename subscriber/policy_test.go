package subscriber_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/keyorder/keyorder/internal/harness"
	"github.com/keyorder/keyorder/ordering/orderingtest"
	"github.com/keyorder/keyorder/publisher"
	"github.com/keyorder/keyorder/subscriber"
)

// calls records handler calls as "key/seq" strings, in order.
type calls struct {
	mu   sync.Mutex
	list []string
	ch   chan struct{} // signalled after every call
}

func (c *calls) add(d *subscriber.Delivery) {
	c.mu.Lock()
	c.list = append(c.list, string(d.Data))
	c.mu.Unlock()
	select {
	case c.ch <- struct{}{}:
	default:
	}
}

func (c *calls) snapshot() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.list...)
}

// receiveWhile runs Receive with h until cond holds of the calls so far.
func receiveWhile(t *testing.T, s *subscriber.Subscription, c *calls, h subscriber.Handler, cond func([]string) bool) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- s.Receive(ctx, h) }()
	deadline := time.After(testTimeout)
	for !cond(c.snapshot()) {
		select {
		case <-c.ch:
		case err := <-done:
			t.Fatalf("Receive returned early: %v", err)
		case <-deadline:
			list := c.snapshot()
			t.Fatalf("gave up after %d calls; the last ones: %v", len(list), list[max(0, len(list)-10):])
		}
	}
	cancel()
	require.NoError(t, <-done)
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// newDeadLetterEnv makes, on the fake started with fopts, an ordered
// subscription with a dead-letter policy of 5 delivery attempts, created
// directly (as one made outside keyorder), and opens it with sopts. It
// returns the env and the dead-letter topic's full name.
func newDeadLetterEnv(t *testing.T, fopts []orderingtest.Option, sopts ...subscriber.Option) (fakeEnv, string) {
	t.Helper()
	srv, client := harness.Fake(t, fopts...)
	topic, subID := names()
	dlq, _ := names()
	dead := path(client, "topics", dlq)
	createDirectly(t, client, &pubsubpb.Subscription{
		Name: path(client, "subscriptions", subID), Topic: path(client, "topics", topic), EnableMessageOrdering: true,
		DeadLetterPolicy: &pubsubpb.DeadLetterPolicy{DeadLetterTopic: dead, MaxDeliveryAttempts: 5},
	}, dead)
	s, err := subscriber.Open(testContext(t), client, subID, sopts...)
	require.NoError(t, err)
	return fakeEnv{srv: srv, client: client, topic: s.Topic(), sub: s}, dead
}

// TestDeadLetteredMessageReleasesItsKey: on a subscription with a
// dead-letter policy, the last failure of a message is not a hold, since
// the service forwards the message instead of redelivering it; the key's
// later messages then run. Until then, they do not.
func TestDeadLetteredMessageReleasesItsKey(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	e, deadTopic := newDeadLetterEnv(t, nil, subscriber.WithMaxAttempts(1))
	srv, s := e.srv, e.sub
	e.publish(t, keyNames(1), 5)

	c := &calls{ch: make(chan struct{}, 1)}
	var attempts []int
	receiveWhile(t, s, c, func(_ context.Context, d *subscriber.Delivery) error {
		c.add(d)
		if string(d.Data) == "key-0/2" {
			attempts = append(attempts, d.DeliveryAttempt)
			return errInjected
		}
		return nil
	}, func(list []string) bool { return contains(list, "key-0/5") })

	assert.Equal(t, []string{"key-0/1", "key-0/2", "key-0/2", "key-0/2", "key-0/2", "key-0/2", "key-0/3", "key-0/4", "key-0/5"}, c.snapshot())
	assert.Equal(t, []int{1, 2, 3, 4, 5}, attempts)
	// The last nack reaches the service with the client's next batch of
	// nacks, and may come after key-0/5 has run.
	require.NoError(t, srv.WaitFor(ctx, func() bool { return len(srv.Messages(deadTopic)) > 0 }))
	dead := srv.Messages(deadTopic)
	require.Len(t, dead, 1)
	assert.Equal(t, "key-0/2", string(dead[0].Data))
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

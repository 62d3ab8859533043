package orderingtest_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"cloud.google.com/go/pubsub/v2"
	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/keyorder/keyorder/internal/harness"
)

// The dead-letter topic of the tests, and a subscription to it.
var deadTopic, deadSub = topicName("dead"), subName("dead")

// deadLettering creates deadTopic and deadSub, and an ordered subscription
// "src" to the fixture's topic that forwards messages to deadTopic after
// attempts delivery attempts (0: the service's default), which edit may
// change before it is created. It returns the subscription's name.
func (f *fixture) deadLettering(attempts int32, edit func(*pubsubpb.Subscription)) string {
	f.t.Helper()
	f.createTopic(&pubsubpb.Topic{Name: deadTopic})
	f.createSubscription(&pubsubpb.Subscription{Name: deadSub, Topic: deadTopic})
	src := &pubsubpb.Subscription{
		Name: subName("src"), Topic: f.topic, EnableMessageOrdering: true,
		DeadLetterPolicy: &pubsubpb.DeadLetterPolicy{DeadLetterTopic: deadTopic, MaxDeliveryAttempts: attempts},
	}
	if edit != nil {
		edit(src)
	}
	f.createSubscription(src)
	return src.Name
}

// TestDeadLetter: a message nacked on every attempt is delivered
// max_delivery_attempts times, with delivery_attempt counting up, then
// forwarded to the dead-letter topic, payload and key intact, while its
// key goes on without it.
func TestDeadLetter(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	src := f.deadLettering(5, nil)

	var mu sync.Mutex
	var attempts []int
	var later int
	f.receive(src, nil, func(_ context.Context, m *pubsub.Message) {
		_, seq := parse(t, m.Data)
		if seq == 2 {
			mu.Lock()
			later++
			mu.Unlock()
			m.Ack()
			return
		}
		if !assert.NotNil(t, m.DeliveryAttempt) {
			m.Nack()
			return
		}
		mu.Lock()
		attempts = append(attempts, *m.DeliveryAttempt)
		mu.Unlock()
		m.Nack()
	})
	dead := make(chan *pubsub.Message, 1)
	f.receive(deadSub, nil, func(_ context.Context, m *pubsub.Message) {
		m.Ack()
		dead <- m
	})
	f.publish(f.topic, []string{"k"}, 0, 2)

	m := recv(t, dead, "the dead-lettered message")
	assert.Equal(t, "k/1", string(m.Data))
	assert.Equal(t, "k", m.OrderingKey)
	f.waitFor("the source settled", func() bool {
		st := f.srv.Stats(src)
		return st.DeadLettered == 1 && st.Outstanding == 0 && st.Acked >= 1
	})
	mu.Lock()
	assert.Equal(t, []int{1, 2, 3, 4, 5}, attempts)
	assert.GreaterOrEqual(t, later, 1, "the key went on past the dead-lettered message")
	mu.Unlock()
	assert.Len(t, f.srv.Messages(deadTopic), 1)
	assert.Equal(t, 5, f.srv.Stats(src).Nacked)
}

// TestDeliveryAttemptNeedsPolicy: the service sets delivery_attempt only
// when the subscription has a dead-letter policy.
func TestDeliveryAttemptNeedsPolicy(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	got := make(chan *pubsub.Message, 1)
	f.receive(f.sub, nil, func(_ context.Context, m *pubsub.Message) {
		m.Ack()
		got <- m
	})
	f.publish(f.topic, []string{"k"}, 0, 1)
	assert.Nil(t, recv(t, got, "a message").DeliveryAttempt)
}

// TestDeadLetteredStaysGone: the service removes a forwarded message from
// the subscription, so a later redelivery of its key's tail neither
// delivers it again nor forwards it a second time. k/2 is dead-lettered
// while k/1 is still outstanding, which keeps k/2 in the key's tail; then
// the tail is redelivered.
func TestDeadLetteredStaysGone(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	src := f.deadLettering(5, nil)

	held := make(chan *pubsub.Message, 1)
	var mu sync.Mutex
	var firsts int
	f.receive(src, nil, func(_ context.Context, m *pubsub.Message) {
		switch _, seq := parse(t, m.Data); seq {
		case 1:
			mu.Lock()
			firsts++
			n := firsts
			mu.Unlock()
			if n == 1 {
				held <- m // left outstanding until k/2 is dead-lettered
				return
			}
			m.Ack()
		default:
			m.Nack()
		}
	})
	f.publish(f.topic, []string{"k"}, 0, 2)
	first := recv(t, held, "k/1")
	f.waitFor("k/2 dead-lettered", func() bool { return f.srv.Stats(src).DeadLettered == 1 })

	n, err := f.srv.RedeliverKey(src, "k")
	require.NoError(t, err)
	assert.Equal(t, 1, n, "only k/1 is left to deliver again")
	f.waitFor("k/1 acked", func() bool {
		st := f.srv.Stats(src)
		return st.Acked == 1 && st.Outstanding == 0
	})
	first.Ack() // stale: its lease was revoked by the redelivery
	assert.Equal(t, 1, f.srv.Stats(src).DeadLettered)
	assert.Len(t, f.srv.Messages(deadTopic), 1, "forwarded once")
	var k2 int
	for _, d := range f.srv.Deliveries(src) {
		if d.Seq == 2 {
			k2++
		}
	}
	assert.Equal(t, 5, k2, "k/2 was delivered max_delivery_attempts times, never after it was forwarded")
}

// TestDeadLetterAttributes: a dead-lettered message keeps its data,
// attributes and ordering key, and carries the attributes the service adds
// when it forwards a message: the delivery attempts, the source
// subscription's ID and project, and the original publish time.
func TestDeadLetterAttributes(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	src := f.deadLettering(6, nil)
	f.receive(src, nil, func(_ context.Context, m *pubsub.Message) { m.Nack() })
	dead := make(chan *pubsub.Message, 1)
	f.receive(deadSub, nil, func(_ context.Context, m *pubsub.Message) {
		m.Ack()
		dead <- m
	})
	p := f.client.Publisher(f.topic)
	defer p.Stop()
	p.EnableMessageOrdering = true
	_, err := p.Publish(f.ctx, &pubsub.Message{Data: []byte("k/1"), OrderingKey: "k", Attributes: map[string]string{"origin": "test"}}).Get(f.ctx)
	require.NoError(t, err)

	m := recv(t, dead, "the dead-lettered message")
	published := f.srv.Messages(f.topic)[0].PublishTime
	assert.Equal(t, "k/1", string(m.Data))
	assert.Equal(t, "k", m.OrderingKey)
	assert.Equal(t, map[string]string{
		"origin": "test",
		"CloudPubSubDeadLetterSourceDeliveryCount":       "6",
		"CloudPubSubDeadLetterSourceSubscription":        "src",
		"CloudPubSubDeadLetterSourceSubscriptionProject": harness.Project,
		"CloudPubSubDeadLetterSourceTopicPublishTime":    published.UTC().Format("2006-01-02T15:04:05.000+00:00"),
	}, m.Attributes)
	at, err := time.Parse(time.RFC3339, m.Attributes["CloudPubSubDeadLetterSourceTopicPublishTime"])
	require.NoError(t, err, "the publish time is RFC 3339")
	assert.WithinDuration(t, published, at, time.Millisecond)
	assert.True(t, m.PublishTime.After(published) || m.PublishTime.Equal(published), "the dead-letter topic publishes it anew")
	assert.NotEqual(t, f.srv.Messages(f.topic)[0].ID, m.ID, "under a message ID of its own")
}

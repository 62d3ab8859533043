package subscriber_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"cloud.google.com/go/pubsub/v2"
	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/keyorder/keyorder/internal/harness"
	"github.com/keyorder/keyorder/internal/leaktest"
	"github.com/keyorder/keyorder/subscriber"
)

func TestMain(m *testing.M) { leaktest.VerifyTestMain(m) }

const testTimeout = 30 * time.Second

func testContext(t testing.TB) context.Context { return harness.Context(t, testTimeout) }

var seq atomic.Int64

// names returns fresh topic and subscription IDs.
func names() (topic, sub string) {
	n := seq.Add(1)
	return fmt.Sprintf("topic-%d", n), fmt.Sprintf("sub-%d", n)
}

// createDirectly creates sub's topic, the other topics named, and sub
// itself through the admin API, bypassing keyorder.
func createDirectly(t *testing.T, c *pubsub.Client, sub *pubsubpb.Subscription, topics ...string) {
	t.Helper()
	ctx := testContext(t)
	for _, tp := range append([]string{sub.Topic}, topics...) {
		_, err := c.TopicAdminClient.CreateTopic(ctx, &pubsubpb.Topic{Name: tp})
		require.NoError(t, err)
	}
	_, err := c.SubscriptionAdminClient.CreateSubscription(ctx, sub)
	require.NoError(t, err)
}

func path(c *pubsub.Client, kind, id string) string {
	return "projects/" + c.Project() + "/" + kind + "/" + id
}

func TestCreateWithTopicCreatesWhatIsMissing(t *testing.T) {
	t.Parallel()
	_, client := harness.Pstest(t)
	ctx := testContext(t)
	topic, sub := names()

	s, err := subscriber.CreateWithTopic(ctx, client, topic, sub)
	require.NoError(t, err)
	assert.True(t, s.Ordered())
	assert.Equal(t, path(client, "subscriptions", sub), s.Name())
	assert.Equal(t, path(client, "topics", topic), s.Topic())

	got, err := client.SubscriptionAdminClient.GetSubscription(ctx, &pubsubpb.GetSubscriptionRequest{Subscription: s.Name()})
	require.NoError(t, err)
	assert.True(t, got.EnableMessageOrdering, "created with message ordering")
	assert.Equal(t, s.Topic(), got.Topic)

	// Again: both exist now, and nothing changes.
	again, err := subscriber.CreateWithTopic(ctx, client, topic, sub)
	require.NoError(t, err)
	assert.True(t, again.Ordered())
}

func TestCreateWithTopicKeepsAnExistingSubscription(t *testing.T) {
	t.Parallel()
	_, client := harness.Pstest(t)
	ctx := testContext(t)
	topic, sub := names()
	createDirectly(t, client, &pubsubpb.Subscription{
		Name: path(client, "subscriptions", sub), Topic: path(client, "topics", topic), EnableMessageOrdering: false,
	})

	s, err := subscriber.CreateWithTopic(ctx, client, topic, sub)
	require.NoError(t, err)
	assert.False(t, s.Ordered(), "an existing subscription keeps its own setting")

	got, err := client.SubscriptionAdminClient.GetSubscription(ctx, &pubsubpb.GetSubscriptionRequest{Subscription: s.Name()})
	require.NoError(t, err)
	assert.False(t, got.EnableMessageOrdering, "and it is not changed")
}

func TestCreateWithTopicRejectsAnotherTopic(t *testing.T) {
	t.Parallel()
	_, client := harness.Pstest(t)
	ctx := testContext(t)
	topic, sub := names()
	other, _ := names()
	_, err := subscriber.CreateWithTopic(ctx, client, other, sub)
	require.NoError(t, err)

	_, err = subscriber.CreateWithTopic(ctx, client, topic, sub)
	require.ErrorIs(t, err, subscriber.ErrTopicMismatch)
	assert.Contains(t, err.Error(), other)
}

func TestOpen(t *testing.T) {
	t.Parallel()
	_, client := harness.Pstest(t)
	ctx := testContext(t)
	topic, sub := names()

	_, err := subscriber.Open(ctx, client, sub)
	require.ErrorIs(t, err, subscriber.ErrNotFound)
	assert.Contains(t, err.Error(), sub)

	_, err = subscriber.CreateWithTopic(ctx, client, topic, sub)
	require.NoError(t, err)
	s, err := subscriber.Open(ctx, client, path(client, "subscriptions", sub))
	require.NoError(t, err)
	assert.True(t, s.Ordered())
	assert.Equal(t, path(client, "topics", topic), s.Topic())
}

func TestOptionsAreValidated(t *testing.T) {
	t.Parallel()
	_, client := harness.Pstest(t)
	ctx := testContext(t)
	topic, sub := names()
	for _, opt := range []subscriber.Option{
		subscriber.WithWorkers(0),
		subscriber.WithQueueSize(0),
		subscriber.WithMaxAttempts(0),
		subscriber.WithBackoff(0, time.Second),
		subscriber.WithBackoff(2*time.Second, time.Second),
		subscriber.WithDrainTimeout(-1),
		subscriber.WithDedupWindow(-1),
		subscriber.WithRedeliveryWait(0),
		subscriber.WithReceiveSettings(pubsub.ReceiveSettings{ShutdownOptions: &pubsub.ShutdownOptions{}}),
		subscriber.WithMeterProvider(nil),
		subscriber.WithLogger(nil),
		subscriber.WithDeadLetterPolicy("", 5),
		subscriber.WithDeadLetterPolicy("dlq", 4),
		subscriber.WithDeadLetterPolicy("dlq", 101),
		subscriber.WithRetryPolicy(-time.Second, time.Second),
		subscriber.WithRetryPolicy(2*time.Second, time.Second),
		subscriber.WithRetryPolicy(0, 601*time.Second),
		subscriber.WithParking(""),
	} {
		_, err := subscriber.CreateWithTopic(ctx, client, topic, sub, opt)
		require.ErrorIs(t, err, subscriber.ErrInvalidConfig)
	}
	// Nothing was created by the failed calls.
	_, err := subscriber.Open(ctx, client, sub)
	require.True(t, errors.Is(err, subscriber.ErrNotFound), "%v", err)

	// Nor does Receive take a nil handler.
	s, err := subscriber.CreateWithTopic(ctx, client, topic, sub)
	require.NoError(t, err)
	require.ErrorIs(t, s.Receive(ctx, nil), subscriber.ErrInvalidConfig)
}

package subscriber_test

import (
	"testing"
	"time"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/keyorder/keyorder/internal/harness"
	"github.com/keyorder/keyorder/subscriber"
)

// TestCreateWithTopicSetsThePolicies checks that CreateWithTopic gives a
// subscription it creates the service's dead-letter and retry policies of
// the options, creating the dead-letter topic, and that an existing
// subscription keeps its own, which the Subscription reports.
func TestCreateWithTopicSetsThePolicies(t *testing.T) {
	t.Parallel()
	_, client := harness.Fake(t)
	ctx := testContext(t)
	topic, subID := names()
	dlq, _ := names()
	opts := []subscriber.Option{
		subscriber.WithDeadLetterPolicy(dlq, 7),
		subscriber.WithRetryPolicy(time.Second, time.Minute),
	}
	s, err := subscriber.CreateWithTopic(ctx, client, topic, subID, opts...)
	require.NoError(t, err)

	got, err := client.SubscriptionAdminClient.GetSubscription(ctx, &pubsubpb.GetSubscriptionRequest{Subscription: s.Name()})
	require.NoError(t, err)
	require.NotNil(t, got.DeadLetterPolicy)
	assert.Equal(t, path(client, "topics", dlq), got.DeadLetterPolicy.DeadLetterTopic)
	assert.Equal(t, int32(7), got.DeadLetterPolicy.MaxDeliveryAttempts)
	require.NotNil(t, got.RetryPolicy)
	assert.Equal(t, time.Second, got.RetryPolicy.MinimumBackoff.AsDuration())
	assert.Equal(t, time.Minute, got.RetryPolicy.MaximumBackoff.AsDuration())
	_, err = client.TopicAdminClient.GetTopic(ctx, &pubsubpb.GetTopicRequest{Topic: path(client, "topics", dlq)})
	require.NoError(t, err, "the dead-letter topic was created")

	dlTopic, attempts := s.DeadLetterPolicy()
	assert.Equal(t, path(client, "topics", dlq), dlTopic)
	assert.Equal(t, 7, attempts)
	lo, hi, ok := s.RetryPolicy()
	assert.True(t, ok)
	assert.Equal(t, time.Second, lo)
	assert.Equal(t, time.Minute, hi)

	t.Run("an existing subscription keeps its own", func(t *testing.T) {
		topic, subID := names()
		createDirectly(t, client, &pubsubpb.Subscription{
			Name: path(client, "subscriptions", subID), Topic: path(client, "topics", topic), EnableMessageOrdering: true,
		})
		s, err := subscriber.CreateWithTopic(ctx, client, topic, subID, opts...)
		require.NoError(t, err)
		dlTopic, attempts := s.DeadLetterPolicy()
		assert.Empty(t, dlTopic)
		assert.Zero(t, attempts)
		_, _, ok := s.RetryPolicy()
		assert.False(t, ok)
		got, err := client.SubscriptionAdminClient.GetSubscription(ctx, &pubsubpb.GetSubscriptionRequest{Subscription: s.Name()})
		require.NoError(t, err)
		assert.Nil(t, got.DeadLetterPolicy, "not changed")
		assert.Nil(t, got.RetryPolicy, "not changed")

		opened, err := subscriber.Open(ctx, client, subID, opts...)
		require.NoError(t, err)
		_, _, ok = opened.RetryPolicy()
		assert.False(t, ok, "Open never sets a policy")
	})
}

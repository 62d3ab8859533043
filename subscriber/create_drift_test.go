package subscriber_test

import (
	"testing"
	"time"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/fieldmaskpb"

	"github.com/keyorder/keyorder/internal/harness"
	"github.com/keyorder/keyorder/internal/metrictest"
	"github.com/keyorder/keyorder/subscriber"
)

// TestOpenLogsCreationOptionsThatDiffer: options that matter only at
// creation change nothing on Open of an existing subscription; each one
// that differs from what the subscription or its topic has is logged at
// Warn, once, naming the difference, and one that matches is not.
func TestOpenLogsCreationOptionsThatDiffer(t *testing.T) {
	t.Parallel()
	_, client := harness.Fake(t)
	ctx := testContext(t)
	topic, subID := names()
	createDirectly(t, client, &pubsubpb.Subscription{
		Name: path(client, "subscriptions", subID), Topic: path(client, "topics", topic), EnableMessageOrdering: true,
	})
	eoTopic, eoSub := names()
	createDirectly(t, client, &pubsubpb.Subscription{
		Name: path(client, "subscriptions", eoSub), Topic: path(client, "topics", eoTopic),
		EnableMessageOrdering: true, EnableExactlyOnceDelivery: true,
	})
	_, err := client.TopicAdminClient.UpdateTopic(ctx, &pubsubpb.UpdateTopicRequest{
		Topic:      &pubsubpb.Topic{Name: path(client, "topics", eoTopic), MessageRetentionDuration: durationpb.New(time.Hour)},
		UpdateMask: &fieldmaskpb.FieldMask{Paths: []string{"message_retention_duration"}},
	})
	require.NoError(t, err)

	// warnings opens subID with opts and returns the messages logged at Warn.
	warnings := func(t *testing.T, open func(...subscriber.Option) (*subscriber.Subscription, error), opts ...subscriber.Option) []map[string]any {
		t.Helper()
		var logs metrictest.Log
		_, err := open(append(opts, subscriber.WithLogger(logs.Logger()))...)
		require.NoError(t, err)
		var warns []map[string]any
		for _, r := range logs.Records(t) {
			if r["level"] == "WARN" {
				warns = append(warns, r)
			}
		}
		return warns
	}
	open := func(sub string) func(...subscriber.Option) (*subscriber.Subscription, error) {
		return func(opts ...subscriber.Option) (*subscriber.Subscription, error) {
			return subscriber.Open(ctx, client, sub, opts...)
		}
	}

	t.Run("exactly-once delivery", func(t *testing.T) {
		warns := warnings(t, open(subID), subscriber.WithExactlyOnceDelivery())
		require.Len(t, warns, 1, "%v", warns)
		assert.Equal(t, "keyorder/subscriber: the subscription exists and keeps its own exactly-once delivery, which differs from WithExactlyOnceDelivery", warns[0]["msg"])
		assert.Equal(t, path(client, "subscriptions", subID), warns[0]["subscription"])
		assert.Empty(t, warnings(t, open(eoSub), subscriber.WithExactlyOnceDelivery()), "it has what was asked")
	})
	t.Run("exactly-once delivery, CreateWithTopic of an existing one", func(t *testing.T) {
		create := func(opts ...subscriber.Option) (*subscriber.Subscription, error) {
			return subscriber.CreateWithTopic(ctx, client, topic, subID, opts...)
		}
		warns := warnings(t, create, subscriber.WithExactlyOnceDelivery())
		require.Len(t, warns, 1, "%v", warns)
		assert.Contains(t, warns[0]["msg"], "keeps its own exactly-once delivery")
	})
	t.Run("topic retention", func(t *testing.T) {
		warns := warnings(t, open(subID), subscriber.WithTopicRetention(2*time.Hour))
		require.Len(t, warns, 1, "%v", warns)
		assert.Equal(t, "keyorder/subscriber: the topic exists and keeps its own message retention, which differs from WithTopicRetention", warns[0]["msg"])
		assert.Equal(t, path(client, "topics", topic), warns[0]["topic"])
		assert.InDelta(t, float64(2*time.Hour), warns[0]["asked"], 0, "JSON logs a duration in nanoseconds")
		assert.Empty(t, warnings(t, open(eoSub), subscriber.WithTopicRetention(time.Hour)), "its topic keeps an hour, as asked")
		got, err := client.TopicAdminClient.GetTopic(ctx, &pubsubpb.GetTopicRequest{Topic: path(client, "topics", topic)})
		require.NoError(t, err)
		assert.Zero(t, got.GetMessageRetentionDuration().AsDuration(), "Open changes nothing")
	})
	t.Run("retry and dead-letter policies", func(t *testing.T) {
		dlq, _ := names()
		warns := warnings(t, open(subID), subscriber.WithRetryPolicy(time.Second, time.Minute), subscriber.WithDeadLetterPolicy(dlq, 5))
		require.Len(t, warns, 1, "%v", warns)
		assert.Contains(t, warns[0]["msg"], "keeps its own policies")
		assert.Contains(t, warns[0]["differences"], "retry policy none")
		assert.Contains(t, warns[0]["differences"], "dead-letter policy none")
	})
	t.Run("run-time options only", func(t *testing.T) {
		assert.Empty(t, warnings(t, open(subID), subscriber.WithBackoff(time.Second, time.Minute), subscriber.WithWorkers(4)))
	})
}

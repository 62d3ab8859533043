package subscriber_test

import (
	"context"
	"testing"
	"time"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/keyorder/keyorder/subscriber"
)

// TestSetTopicRetention: a topic made without retention, with no
// subscription, is given retention by SetTopicRetention, after which
// Replay reads what is published to it; what it cannot do it refuses
// with the documented errors, and it creates no topic.
func TestSetTopicRetention(t *testing.T) {
	t.Parallel()
	e := newReplayEnv(t, 0)
	ctx := testContext(t)
	none := func(context.Context, *subscriber.Delivery) error { return nil }
	require.ErrorIs(t, subscriber.Replay(ctx, e.client, e.topic, time.Time{}, none), subscriber.ErrNoRetention)

	require.NoError(t, subscriber.SetTopicRetention(ctx, e.client, e.topic, 2*time.Hour))
	got, err := e.client.TopicAdminClient.GetTopic(ctx, &pubsubpb.GetTopicRequest{Topic: e.topic})
	require.NoError(t, err)
	assert.Equal(t, 2*time.Hour, got.GetMessageRetentionDuration().AsDuration())
	assert.Empty(t, e.srv.Subscriptions(), "no subscription was made")

	e.publish(t, []string{"key-0"}, 1, 3, "")
	tr := newTracker([]string{"key-0"}, 3)
	require.NoError(t, subscriber.Replay(ctx, e.client, e.topic, time.Time{}, tr.handler(none), subscriber.WithQuietPeriod(200*time.Millisecond)))
	tr.verify(t)

	for _, tc := range []struct {
		name  string
		topic string
		d     time.Duration
		want  error
	}{
		{"under 10 minutes", e.topic, time.Minute, subscriber.ErrInvalidConfig},
		{"over 31 days", e.topic, 32 * 24 * time.Hour, subscriber.ErrInvalidConfig},
		{"a malformed ID", "no spaces", time.Hour, subscriber.ErrInvalidConfig},
		{"a missing topic", "nowhere", time.Hour, subscriber.ErrNotFound},
	} {
		assert.ErrorIs(t, subscriber.SetTopicRetention(ctx, e.client, tc.topic, tc.d), tc.want, tc.name)
	}
	_, err = e.client.TopicAdminClient.GetTopic(ctx, &pubsubpb.GetTopicRequest{Topic: path(e.client, "topics", "nowhere")})
	assert.Equal(t, codes.NotFound, status.Code(err), "no topic was created")
}

// TestReplayOfAMissingTopic: Replay of a topic that does not exist
// returns ErrNotFound, naming the topic, as Open does for a subscription.
func TestReplayOfAMissingTopic(t *testing.T) {
	t.Parallel()
	e := newReplayEnv(t, time.Hour)
	err := subscriber.Replay(testContext(t), e.client, "nowhere", time.Time{}, func(context.Context, *subscriber.Delivery) error { return nil })
	require.ErrorIs(t, err, subscriber.ErrNotFound)
	assert.Contains(t, err.Error(), "topic projects/keyorder-test/topics/nowhere")
	e.requireNoSubscription(t)
}

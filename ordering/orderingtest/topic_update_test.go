package orderingtest_test

import (
	"testing"
	"time"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/fieldmaskpb"
)

// TestUpdateTopic gives an existing topic retention and labels, as the
// service's UpdateTopic does, and a subscription created afterwards seeks
// back over what the topic holds; the mask decides what changes, a field
// it names but the request leaves unset is cleared, and what the fake
// does not model is Unimplemented.
func TestUpdateTopic(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	tc := f.client.TopicAdminClient
	topic := topicName("later-retained")
	f.createTopic(&pubsubpb.Topic{Name: topic})
	at := time.Now()
	f.publish(topic, []string{"k"}, 0, 2)

	update := func(p *pubsubpb.Topic, paths ...string) (*pubsubpb.Topic, error) {
		return tc.UpdateTopic(f.ctx, &pubsubpb.UpdateTopicRequest{Topic: p, UpdateMask: &fieldmaskpb.FieldMask{Paths: paths}})
	}
	got, err := update(&pubsubpb.Topic{Name: topic, MessageRetentionDuration: durationpb.New(time.Hour),
		Labels: map[string]string{"team": "ledger"}}, "message_retention_duration", "labels")
	require.NoError(t, err)
	assert.Equal(t, time.Hour, got.GetMessageRetentionDuration().AsDuration())
	assert.Equal(t, map[string]string{"team": "ledger"}, got.GetLabels())
	read, err := tc.GetTopic(f.ctx, &pubsubpb.GetTopicRequest{Topic: topic})
	require.NoError(t, err)
	assert.Equal(t, time.Hour, read.GetMessageRetentionDuration().AsDuration(), "kept")

	late := subName("after-update")
	f.createSubscription(&pubsubpb.Subscription{Name: late, Topic: topic, EnableMessageOrdering: true})
	f.seek(late, at)
	data, _ := f.receiveData(late)
	f.waitFor("the retained messages", func() bool { return f.srv.Stats(late).Acked == 2 })
	assert.Equal(t, []string{"k/1", "k/2"}, data())

	got, err = update(&pubsubpb.Topic{Name: topic}, "labels")
	require.NoError(t, err)
	assert.Empty(t, got.GetLabels(), "named in the mask, unset: cleared")
	assert.Equal(t, time.Hour, got.GetMessageRetentionDuration().AsDuration(), "not in the mask: kept")

	for _, c := range []struct {
		name  string
		topic *pubsubpb.Topic
		paths []string
		code  codes.Code
	}{
		{"an empty mask", &pubsubpb.Topic{Name: topic}, nil, codes.InvalidArgument},
		{"retention under 10 minutes", &pubsubpb.Topic{Name: topic, MessageRetentionDuration: durationpb.New(time.Minute)}, []string{"message_retention_duration"}, codes.InvalidArgument},
		{"a field that is not one", &pubsubpb.Topic{Name: topic}, []string{"colour"}, codes.InvalidArgument},
		{"the name", &pubsubpb.Topic{Name: topic}, []string{"name"}, codes.InvalidArgument},
		{"a field not modelled", &pubsubpb.Topic{Name: topic, KmsKeyName: "k"}, []string{"kms_key_name"}, codes.Unimplemented},
		{"a missing topic", &pubsubpb.Topic{Name: topicName("nowhere")}, []string{"labels"}, codes.NotFound},
	} {
		_, err := update(c.topic, c.paths...)
		assert.Equal(t, c.code, status.Code(err), "%s: %v", c.name, err)
	}
}

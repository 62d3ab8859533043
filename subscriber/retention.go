package subscriber

import (
	"context"
	"fmt"
	"time"

	"cloud.google.com/go/pubsub/v2"
	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/fieldmaskpb"

	"github.com/keyorder/keyorder/internal/resource"
)

// SetTopicRetention gives the existing topic topicID (an ID, or a full
// name) message retention d: from then on the topic keeps every message
// for d, acknowledged or not, so that [Replay] can read it back and a
// subscription can be sought back over it, whether or not any
// subscription exists. It is what [WithTopicRetention] does for a topic
// [CreateWithTopic] creates, for a topic that exists already, and it
// touches nothing else of the topic. Messages published before the call
// are kept as the service keeps them, which may be only from the call on.
//
// d is 10 minutes to 31 days, as the service requires; retention is billed
// by the service as storage. SetTopicRetention returns an error matching
// [ErrInvalidConfig] for a d out of range or a malformed ID,
// [ErrNotFound] when the topic does not exist (it creates none, so that
// a mistyped name is not a new topic), and otherwise the service's error.
func SetTopicRetention(ctx context.Context, client *pubsub.Client, topicID string, d time.Duration) (err error) {
	defer func() { err = ended(ctx, "setting a topic's retention", err) }()
	if client == nil {
		return invalid("SetTopicRetention with a nil client")
	}
	if d < minTopicRetention || d > maxTopicRetention {
		return invalid("SetTopicRetention(%v): need %v to %v", d, minTopicRetention, maxTopicRetention)
	}
	if err := resource.Topic(topicID); err != nil {
		return invalid("SetTopicRetention: %v", err)
	}
	topic := fullName(client, "topics", topicID)
	_, err = client.TopicAdminClient.UpdateTopic(ctx, &pubsubpb.UpdateTopicRequest{
		Topic:      &pubsubpb.Topic{Name: topic, MessageRetentionDuration: durationpb.New(d)},
		UpdateMask: &fieldmaskpb.FieldMask{Paths: []string{"message_retention_duration"}},
	})
	switch {
	case status.Code(err) == codes.NotFound:
		return fmt.Errorf("%w: topic %s", ErrNotFound, topic)
	case err != nil:
		return fmt.Errorf("keyorder/subscriber: setting the retention of topic %s: %w", topic, err)
	}
	return nil
}

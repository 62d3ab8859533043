package subscriber

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"time"

	"cloud.google.com/go/pubsub/v2"
	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/keyorder/keyorder/internal/resource"

	"github.com/keyorder/keyorder/subscriber/internal/engine"
	"github.com/keyorder/keyorder/subscriber/internal/parking"
	"github.com/keyorder/keyorder/subscriber/internal/push"
)

// A Subscription receives the messages of one Pub/Sub subscription, in
// order per key when the subscription has message ordering. Create one with
// [CreateWithTopic] or [Open]; it is safe for concurrent use, but runs one
// [Subscription.Receive] at a time.
type Subscription struct {
	client  *pubsub.Client
	name    string // projects/P/subscriptions/S
	topic   string // projects/P/topics/T
	ordered bool
	// exactlyOnce is the subscription's exactly-once delivery setting.
	exactlyOnce bool
	cfg         config
	receiving   atomic.Bool // a Receive is running
	// current is the running Receive's state, for Stats and HeldKeys;
	// nil when none runs. Set and cleared by Receive.
	current atomic.Pointer[engine.Engine]
	// parkNow is the running Receive's parking, for Parked, Release,
	// RequestRelease, WithdrawRelease and Stats; nil when none runs or it
	// has no parking. Set with current, by Receive or the push endpoint.
	parkNow atomic.Pointer[parking.Parking]
	counts  engine.Counters // cumulative over every Receive
	// span is set, before its Receive starts, on the subscription of a
	// Replay: the range it reads; nil otherwise.
	span *engine.Range

	// policies are the service's policies of the subscription, set when
	// made (policies.go).
	policies servicePolicies
	// parking names the parking and control topics, nil without
	// WithParking (parking.go).
	parking *parking.Topics
	// push is the subscription's push configuration, set when made; and
	// pushing its push endpoint, once PushHandler has made it (push.go).
	push    push.Settings
	pushing atomic.Pointer[push.Endpoint]
}

// CreateWithTopic returns the subscription subID of topic topicID, creating
// what is missing (S1): the topic, then the subscription, with message
// ordering on. An existing subscription is used as it is, ordered or not,
// since ordering cannot be changed after creation; [Subscription.Ordered]
// reports which. A subscription attached to another topic is an error
// matching [ErrTopicMismatch].
//
// IDs may also be full resource names. Existing resources are looked up
// before anything is created, so a client allowed only to read them and to
// subscribe works too.
func CreateWithTopic(ctx context.Context, client *pubsub.Client, topicID, subID string, opts ...Option) (_ *Subscription, err error) {
	defer func() { err = ended(ctx, "creating a subscription", err) }()
	cfg, err := newConfig(opts)
	if err != nil {
		return nil, err
	}
	if client == nil {
		return nil, invalid("CreateWithTopic with nil client")
	}
	if err := checkNames(topicID, subID); err != nil {
		return nil, err
	}
	topic := fullName(client, "topics", topicID)
	name := fullName(client, "subscriptions", subID)
	if err := cfg.checkLoops(client, topic); err != nil {
		return nil, err
	}
	if err := ensureTopic(ctx, client, topic, cfg.topicRetention, cfg.Log()); err != nil {
		return nil, err
	}
	sub, err := client.SubscriptionAdminClient.GetSubscription(ctx, &pubsubpb.GetSubscriptionRequest{Subscription: name})
	if status.Code(err) == codes.NotFound {
		if err := cfg.checkPull(name, push.Settings{Endpoint: cfg.push.endpoint}); err != nil {
			return nil, err // before it is made a pull subscription
		}
		want := &pubsubpb.Subscription{
			Name: name, Topic: topic, EnableMessageOrdering: true,
			EnableExactlyOnceDelivery: cfg.exactlyOnce,
		}
		if err := cfg.policies.apply(ctx, client, want); err != nil {
			return nil, err
		}
		cfg.push.apply(want)
		sub, err = client.SubscriptionAdminClient.CreateSubscription(ctx, want)
		if status.Code(err) == codes.AlreadyExists { // created meanwhile by someone else
			sub, err = client.SubscriptionAdminClient.GetSubscription(ctx, &pubsubpb.GetSubscriptionRequest{Subscription: name})
		}
	}
	if err != nil {
		return nil, fmt.Errorf("keyorder/subscriber: subscription %s: %w", name, err)
	}
	if sub.Topic != topic {
		return nil, fmt.Errorf("%w: %s is attached to %s, not %s", ErrTopicMismatch, name, sub.Topic, topic)
	}
	warnExactlyOnce(cfg.Log(), sub, cfg.exactlyOnce) // create_drift.go
	return newSubscription(ctx, client, sub, cfg)
}

// Open returns the existing subscription subID (an ID or a full name),
// with its own ordering setting. A missing subscription is an error
// matching [ErrNotFound]. Open creates nothing: each option that matters
// only at creation (dead-letter and retry policies, exactly-once
// delivery, topic retention, push) and differs from what the subscription
// or its topic has is logged at Warn, once.
func Open(ctx context.Context, client *pubsub.Client, subID string, opts ...Option) (_ *Subscription, err error) {
	defer func() { err = ended(ctx, "opening a subscription", err) }()
	cfg, err := newConfig(opts)
	if err != nil {
		return nil, err
	}
	if client == nil {
		return nil, invalid("Open with nil client")
	}
	if err := checkSubscription(subID); err != nil {
		return nil, err
	}
	name := fullName(client, "subscriptions", subID)
	sub, err := client.SubscriptionAdminClient.GetSubscription(ctx, &pubsubpb.GetSubscriptionRequest{Subscription: name})
	if status.Code(err) == codes.NotFound {
		return nil, fmt.Errorf("%w: subscription %s", ErrNotFound, name)
	}
	if err != nil {
		return nil, fmt.Errorf("keyorder/subscriber: subscription %s: %w", name, err)
	}
	if err := cfg.checkLoops(client, sub.Topic); err != nil {
		return nil, err
	}
	warnOpenDrift(ctx, client, sub, cfg) // create_drift.go
	return newSubscription(ctx, client, sub, cfg)
}

func newSubscription(ctx context.Context, client *pubsub.Client, sub *pubsubpb.Subscription, cfg config) (*Subscription, error) {
	s := &Subscription{
		client:      client,
		name:        sub.Name,
		topic:       sub.Topic,
		ordered:     sub.EnableMessageOrdering,
		exactlyOnce: sub.EnableExactlyOnceDelivery,
		cfg:         cfg,
	}
	s.policies = policiesOf(sub)
	warnPolicies(cfg.Log(), client, s.name, s.topic, cfg.policies, s.policies)
	s.push = pushSettingsOf(sub)
	if err := cfg.checkPull(s.name, s.push); err != nil {
		return nil, err
	}
	if err := cfg.push.check(cfg.Log(), s.name, s.push); err != nil {
		return nil, err
	}
	if err := checkParkingLabel(sub, parkingTopic(client, cfg.parking)); err != nil {
		return nil, err
	}
	if cfg.parking != "" {
		var err error
		if s.parking, err = setupParking(ctx, client, sub, cfg.parking); err != nil {
			return nil, err
		}
		if err := chooseParking(ctx, client, sub, s.parking); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// ensureTopic creates topic unless it exists, with message retention for
// retention when it is positive. An existing topic keeps its own
// retention; if it differs from the one asked for, a warning to log says
// so.
func ensureTopic(ctx context.Context, client *pubsub.Client, topic string, retention time.Duration, log *slog.Logger) error {
	got, err := client.TopicAdminClient.GetTopic(ctx, &pubsubpb.GetTopicRequest{Topic: topic})
	if status.Code(err) == codes.NotFound {
		want := &pubsubpb.Topic{Name: topic}
		if retention > 0 {
			want.MessageRetentionDuration = durationpb.New(retention)
		}
		if _, err = client.TopicAdminClient.CreateTopic(ctx, want); err == nil {
			return nil
		}
		if status.Code(err) == codes.AlreadyExists { // created meanwhile by someone else
			got, err = client.TopicAdminClient.GetTopic(ctx, &pubsubpb.GetTopicRequest{Topic: topic})
		}
	}
	if err != nil {
		return fmt.Errorf("keyorder/subscriber: topic %s: %w", topic, err)
	}
	if have := got.GetMessageRetentionDuration().AsDuration(); retention > 0 && have != retention {
		log.Warn("keyorder/subscriber: the topic exists and keeps its own message retention, which differs from WithTopicRetention",
			"topic", topic, "retention", have, "asked", retention)
	}
	return nil
}

// checkNames checks the names of a topic and a subscription, IDs or full
// names, against the service's rules, before any request.
func checkNames(topic, sub string) error {
	if err := resource.Topic(topic); err != nil {
		return invalid("%v", err)
	}
	return checkSubscription(sub)
}

// checkSubscription checks a subscription's name, before any request.
func checkSubscription(sub string) error {
	if err := resource.Subscription(sub); err != nil {
		return invalid("%v", err)
	}
	return nil
}

// parkingTopic returns the full name of the parking topic id, "" for "".
func parkingTopic(client *pubsub.Client, id string) string {
	if id == "" {
		return ""
	}
	return fullName(client, "topics", id)
}

// fullName turns an ID into a resource name of client's project; a full
// name is returned as it is.
func fullName(client *pubsub.Client, kind, id string) string {
	if strings.HasPrefix(id, "projects/") {
		return id
	}
	return "projects/" + client.Project() + "/" + kind + "/" + id
}

// Ordered reports whether the subscription delivers messages in order per
// ordering key. On an unordered subscription, Receive still runs a key's
// deliveries on one partition in the order they arrive, but the service
// promises no order, and a failed message does not hold its key (S8).
func (s *Subscription) Ordered() bool { return s.ordered }

// Name returns the subscription's full resource name.
func (s *Subscription) Name() string { return s.name }

// Topic returns the full resource name of the subscription's topic.
func (s *Subscription) Topic() string { return s.topic }

// ExactlyOnce reports whether the subscription has exactly-once delivery.
// If so, Receive waits for the service to confirm each ack, and a message
// whose ack failed runs again when it comes back.
func (s *Subscription) ExactlyOnce() bool { return s.exactlyOnce }

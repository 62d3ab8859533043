package subscriber

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"cloud.google.com/go/pubsub/v2"
	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"google.golang.org/protobuf/types/known/durationpb"
)

// The service's own policies of a subscription: where it forwards a message
// it has delivered too often (dead-lettering), and how long it waits before
// sending a nacked message again (retry). [CreateWithTopic] sets them on a
// subscription it creates, from [WithDeadLetterPolicy] and
// [WithRetryPolicy]. Like message ordering (S1), they belong to the
// subscription: an existing one keeps its own, and a Subscription reports
// them ([Subscription.DeadLetterPolicy], [Subscription.RetryPolicy]) and
// logs a warning when they differ from the options.

// The bounds the service puts on the policies.
const (
	minDeadLetterAttempts = 5
	maxDeadLetterAttempts = 100
	maxRetryBackoff       = 600 * time.Second
)

// servicePolicies are the policies asked for with options, or those a
// subscription has.
type servicePolicies struct {
	deadLetterTopic     string // an ID or a full name; "" for none
	maxDeliveryAttempts int
	retry               bool // a retry policy, with the two backoffs
	minBackoff          time.Duration
	maxBackoff          time.Duration
}

// apply sets the policies on sub, a subscription about to be created, and
// creates its dead-letter topic if it is missing.
func (p servicePolicies) apply(ctx context.Context, client *pubsub.Client, sub *pubsubpb.Subscription) error {
	if p.deadLetterTopic != "" {
		topic := fullName(client, "topics", p.deadLetterTopic)
		if err := ensureTopic(ctx, client, topic, 0, slog.Default()); err != nil { // no retention asked: nothing to log
			return err
		}
		sub.DeadLetterPolicy = &pubsubpb.DeadLetterPolicy{DeadLetterTopic: topic, MaxDeliveryAttempts: int32(p.maxDeliveryAttempts)}
	}
	if p.retry {
		sub.RetryPolicy = &pubsubpb.RetryPolicy{MinimumBackoff: durationpb.New(p.minBackoff), MaximumBackoff: durationpb.New(p.maxBackoff)}
	}
	return nil
}

// policiesOf reads the policies a subscription has, with the service's
// defaults filled in.
func policiesOf(sub *pubsubpb.Subscription) servicePolicies {
	var p servicePolicies
	if dl := sub.GetDeadLetterPolicy(); dl.GetDeadLetterTopic() != "" {
		p.deadLetterTopic, p.maxDeliveryAttempts = dl.GetDeadLetterTopic(), int(dl.GetMaxDeliveryAttempts())
		if p.maxDeliveryAttempts == 0 {
			p.maxDeliveryAttempts = 5 // the service's default
		}
	}
	if rp := sub.GetRetryPolicy(); rp != nil {
		p.retry = true
		p.minBackoff, p.maxBackoff = 10*time.Second, maxRetryBackoff // the service's defaults
		if rp.GetMinimumBackoff() != nil {
			p.minBackoff = rp.GetMinimumBackoff().AsDuration()
		}
		if rp.GetMaximumBackoff() != nil {
			p.maxBackoff = rp.GetMaximumBackoff().AsDuration()
		}
	}
	return p
}

// differences lists how have, a subscription's policies, differs from
// want, those the options asked for; nil if it has what was asked. A
// policy the options do not mention is not compared.
func (want servicePolicies) differences(client *pubsub.Client, have servicePolicies) []string {
	var diff []string
	if want.deadLetterTopic != "" {
		topic := fullName(client, "topics", want.deadLetterTopic)
		if have.deadLetterTopic != topic || have.maxDeliveryAttempts != want.maxDeliveryAttempts {
			diff = append(diff, fmt.Sprintf("dead-letter policy %s after %d attempts, not %s after %d",
				orNone(have.deadLetterTopic), have.maxDeliveryAttempts, topic, want.maxDeliveryAttempts))
		}
	}
	if want.retry && (!have.retry || have.minBackoff != want.minBackoff || have.maxBackoff != want.maxBackoff) {
		h := "none"
		if have.retry {
			h = fmt.Sprintf("%v to %v", have.minBackoff, have.maxBackoff)
		}
		diff = append(diff, fmt.Sprintf("retry policy %s, not %v to %v", h, want.minBackoff, want.maxBackoff))
	}
	return diff
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}

// warnPolicies logs, once per Subscription made, how an existing
// subscription's policies differ from the options: it keeps its own, as it
// does its ordering (S1).
func warnPolicies(log *slog.Logger, client *pubsub.Client, name, topic string, want, have servicePolicies) {
	if have.deadLetterTopic == topic {
		log.Warn("keyorder/subscriber: the subscription dead-letters onto its own topic: its dead letters come back to it as new messages",
			"subscription", name, "topic", topic)
	}
	if diff := want.differences(client, have); diff != nil {
		log.Warn("keyorder/subscriber: the subscription exists and keeps its own policies, which differ from the options",
			"subscription", name, "differences", strings.Join(diff, "; "))
	}
}

// DeadLetterPolicy returns the subscription's dead-letter topic and the
// delivery attempts after which the service forwards a message there, as
// the service reported them when the Subscription was made; "" and 0 when
// it has no dead-letter policy. It may differ from [WithDeadLetterPolicy]:
// only a subscription [CreateWithTopic] creates gets the option's policy.
func (s *Subscription) DeadLetterPolicy() (topic string, maxDeliveryAttempts int) {
	return s.policies.deadLetterTopic, s.policies.maxDeliveryAttempts
}

// RetryPolicy returns the minimum and maximum backoff of the subscription's
// retry policy, as the service reported them when the Subscription was
// made, and false when it has none: the service then sends a nacked
// message again at once. It may differ from [WithRetryPolicy]: only a
// subscription [CreateWithTopic] creates gets the option's policy.
func (s *Subscription) RetryPolicy() (min, max time.Duration, ok bool) {
	return s.policies.minBackoff, s.policies.maxBackoff, s.policies.retry
}

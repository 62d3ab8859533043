package subscriber

import (
	"context"
	"log/slog"

	"cloud.google.com/go/pubsub/v2"
	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
)

// Some options matter only when a subscription or its topic is created:
// WithDeadLetterPolicy, WithRetryPolicy, WithExactlyOnceDelivery,
// WithTopicRetention, and WithPush with WithPushAuth. An existing
// subscription keeps its own settings, as it keeps its ordering (S1), and
// the options then change nothing; a program that reads them at the call
// site would believe otherwise. So whenever [CreateWithTopic] finds the
// subscription existing, or [Open] opens one, each such option that
// differs from what the subscription (or its topic) has is logged at Warn,
// once, when the Subscription is made: the policies by warnPolicies, push
// by pushOptions.check, a topic's retention by ensureTopic in
// CreateWithTopic, and here what those leave out: exactly-once delivery
// on both, and the topic's retention on Open, which creates nothing.

// warnExactlyOnce logs that sub, an existing subscription, lacks the
// exactly-once delivery WithExactlyOnceDelivery asked for. A subscription
// that has it when the option is absent is not a difference: the option
// was not asked.
func warnExactlyOnce(log *slog.Logger, sub *pubsubpb.Subscription, asked bool) {
	if asked && !sub.GetEnableExactlyOnceDelivery() {
		log.Warn("keyorder/subscriber: the subscription exists and keeps its own exactly-once delivery, which differs from WithExactlyOnceDelivery",
			"subscription", sub.GetName(), "exactly_once", false)
	}
}

// warnOpenDrift logs, for Open of sub, how the subscription and its topic
// differ from the creation-only options cfg holds that no other check
// compares: exactly-once delivery, and WithTopicRetention against the
// topic's message retention. The topic is read only when the option was
// given; if it cannot be read (a client allowed only to subscribe, a
// deleted topic), its retention is not compared, and Open goes on.
func warnOpenDrift(ctx context.Context, client *pubsub.Client, sub *pubsubpb.Subscription, cfg config) {
	log := cfg.Log()
	warnExactlyOnce(log, sub, cfg.exactlyOnce)
	if cfg.topicRetention <= 0 {
		return
	}
	topic, err := client.TopicAdminClient.GetTopic(ctx, &pubsubpb.GetTopicRequest{Topic: sub.GetTopic()})
	if err != nil {
		return
	}
	if have := topic.GetMessageRetentionDuration().AsDuration(); have != cfg.topicRetention {
		log.Warn("keyorder/subscriber: the topic exists and keeps its own message retention, which differs from WithTopicRetention",
			"topic", topic.GetName(), "retention", have, "asked", cfg.topicRetention)
	}
}

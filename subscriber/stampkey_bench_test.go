package subscriber_test

import (
	"context"
	"fmt"
	"testing"

	"cloud.google.com/go/pubsub/v2"
	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"

	"github.com/keyorder/keyorder/internal/harness"
	"github.com/keyorder/keyorder/ordering"
	"github.com/keyorder/keyorder/subscriber"
)

// BenchmarkReceiveSignedStamps compares, side by side in one run, keyorder's
// Receive over stamped messages taken on trust ("unsigned", no
// WithStampKey) and over signed ones it verifies ("verified",
// WithStampKey): 200 keys of 50 messages of 256 bytes on an ordered
// subscription of the faithful fake, default settings and unbounded flow
// control, as BenchmarkReceive. Each op is one message; msgs/s is the
// rate from the first delivery to the last handler call.
func BenchmarkReceiveSignedStamps(b *testing.B) {
	const keys, perKey = 200, 50
	_, client := harness.Fake(b)
	unbounded := pubsub.DefaultReceiveSettings
	unbounded.MaxOutstandingMessages = -1
	for _, fc := range []struct {
		name     string
		settings pubsub.ReceiveSettings
	}{
		{"default", pubsub.DefaultReceiveSettings},
		{"unbounded", unbounded},
	} {
		for _, kind := range []struct {
			name string
			sign bool
		}{{"unsigned", false}, {"verified", true}} {
			b.Run(kind.name+"/"+fc.name, func(b *testing.B) {
				var opts []subscriber.Option
				if kind.sign {
					opts = append(opts, subscriber.WithStampKey(stampKey))
				}
				backlog := func(b *testing.B) string { return stampedBacklog(b, client, keys, perKey, kind.sign) }
				measureReceive(b, keys*perKey, backlog, func(ctx context.Context, sub string, handled func()) error {
					s, err := subscriber.Open(ctx, client, sub, append(opts, subscriber.WithReceiveSettings(fc.settings))...)
					if err != nil {
						return err
					}
					return s.Receive(ctx, func(_ context.Context, d *subscriber.Delivery) error {
						if d.Seq == 0 {
							return fmt.Errorf("unstamped %s", d.ID)
						}
						handled()
						return nil
					})
				})
			})
		}
	}
}

// stampedBacklog returns an ordered subscription holding perKey messages
// of each of keys keys, stamped by producer "p" and signed with stampKey
// when sign is set, published key after key in turn through the official
// client.
func stampedBacklog(b *testing.B, client *pubsub.Client, keys, perKey int, sign bool) string {
	b.Helper()
	ctx := context.Background()
	n := backlogs.Add(1)
	topic := fmt.Sprintf("projects/%s/topics/bench-signed-%d", client.Project(), n)
	sub := fmt.Sprintf("projects/%s/subscriptions/bench-signed-%d", client.Project(), n)
	if _, err := client.TopicAdminClient.CreateTopic(ctx, &pubsubpb.Topic{Name: topic}); err != nil {
		b.Fatal(err)
	}
	if _, err := client.SubscriptionAdminClient.CreateSubscription(ctx, &pubsubpb.Subscription{Name: sub, Topic: topic, EnableMessageOrdering: true}); err != nil {
		b.Fatal(err)
	}
	sk, err := ordering.NewStampKeys(stampKey)
	if err != nil {
		b.Fatal(err)
	}
	p := client.Publisher(topic)
	p.EnableMessageOrdering = true
	defer p.Stop()
	data := make([]byte, 256)
	var results []*pubsub.PublishResult
	for i := 1; i <= perKey; i++ {
		for k := 0; k < keys; k++ {
			key := fmt.Sprintf("customer-%d", k)
			attrs := map[string]string{}
			st := ordering.Stamp{Producer: "p", Seq: uint64(i)}
			st.Put(attrs)
			if sign {
				sk.Sign(attrs, key, st, data)
			}
			results = append(results, p.Publish(ctx, &pubsub.Message{Data: data, OrderingKey: key, Attributes: attrs}))
		}
	}
	for _, r := range results {
		if _, err := r.Get(ctx); err != nil {
			b.Fatal(err)
		}
	}
	return sub
}

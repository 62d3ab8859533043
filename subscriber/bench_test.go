package subscriber_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"cloud.google.com/go/pubsub/v2"
	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/keyorder/keyorder/internal/harness"
	"github.com/keyorder/keyorder/publisher"
	"github.com/keyorder/keyorder/subscriber"
)

// BenchmarkReceive compares keyorder's Receive with the official client's,
// on one ordered subscription of the faithful fake: 200 keys of 50
// messages each, a handler that does nothing. With default settings both
// are held near 11,000 msgs/s by the 1000-message outstanding window and
// the official client's 100 ms ack batching; "unbounded" lifts flow control
// to show what each costs. "keyorder+parking" receives with WithParking,
// where no key parks: what parking costs the healthy path, the barrier a
// key newly seen waits for.
// Each op is one message; msgs/s is the rate from the first delivery to the
// last handler call.
func BenchmarkReceive(b *testing.B) {
	const keys, perKey = 200, 50
	_, client := harness.Fake(b)
	ctx := context.Background()

	// backlog creates an ordered subscription holding keys*perKey messages.
	backlog := func(b *testing.B) string {
		return newBacklog(b, client, func(p *publisher.Publisher) {
			for i := 0; i < perKey; i++ {
				for k := 0; k < keys; k++ {
					p.Publish(ctx, &publisher.Message{Data: []byte("payload")}, publisher.WithOrderingKey(fmt.Sprintf("customer-%d", k)))
				}
			}
		})
	}

	// measure runs receive over a fresh backlog for each b.N round of
	// keys*perKey messages and reports the rate.
	measure := func(b *testing.B, receive func(ctx context.Context, sub string, handled func()) error) {
		var total time.Duration
		var msgs int
		for b.Loop() {
			b.StopTimer()
			sub := backlog(b)
			rctx, cancel := context.WithCancel(ctx)
			var n atomic.Int64
			all := make(chan struct{})
			done := make(chan error, 1)
			b.StartTimer()
			start := time.Now()
			go func() {
				done <- receive(rctx, sub, func() {
					if n.Add(1) == keys*perKey {
						close(all)
					}
				})
			}()
			select {
			case <-all:
			case err := <-done:
				b.Fatalf("Receive returned early: %v", err)
			}
			total += time.Since(start)
			msgs += keys * perKey
			b.StopTimer()
			cancel()
			if err := <-done; err != nil {
				b.Fatal(err)
			}
			b.StartTimer()
		}
		b.ReportMetric(float64(msgs)/total.Seconds(), "msgs/s")
		b.ReportMetric(0, "ns/op") // the round, not a message, is the op; msgs/s is the figure
	}

	unbounded := pubsub.DefaultReceiveSettings
	unbounded.MaxOutstandingMessages = -1 // no flow control: the service's 1000-message window is lifted too
	for _, fc := range []struct {
		name     string
		settings pubsub.ReceiveSettings
	}{
		{"default", pubsub.DefaultReceiveSettings},
		{"unbounded", unbounded},
	} {
		b.Run("official/"+fc.name, func(b *testing.B) {
			measure(b, func(ctx context.Context, sub string, handled func()) error {
				s := client.Subscriber(sub)
				s.ReceiveSettings = fc.settings
				return s.Receive(ctx, func(_ context.Context, m *pubsub.Message) {
					m.Ack()
					handled()
				})
			})
		})
		for _, kv := range []struct {
			name string
			opts []subscriber.Option
		}{
			// The global meter provider, which does nothing until the
			// application installs one.
			{"keyorder", nil},
			// An SDK meter provider, read by hand: the cost of metrics on.
			{"keyorder+metrics", []subscriber.Option{subscriber.WithMeterProvider(
				sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader())))}},
			// Parking on, with nothing parked: the cost of its barrier.
			{"keyorder+parking", []subscriber.Option{subscriber.WithParking("bench-parked")}},
		} {
			b.Run(kv.name+"/"+fc.name, func(b *testing.B) {
				measure(b, func(ctx context.Context, sub string, handled func()) error {
					s, err := subscriber.Open(ctx, client, sub, append(kv.opts, subscriber.WithReceiveSettings(fc.settings))...)
					if err != nil {
						return err
					}
					return s.Receive(ctx, func(context.Context, *subscriber.Delivery) error {
						handled()
						return nil
					})
				})
			})
		}
	}
}

// backlogs numbers the topics and subscriptions newBacklog makes.
var backlogs atomic.Int64

// newBacklog creates an ordered subscription on a new topic, has publish
// publish its backlog, waits for every result, and returns the
// subscription's name.
func newBacklog(b *testing.B, client *pubsub.Client, publish func(p *publisher.Publisher)) string {
	b.Helper()
	ctx := context.Background()
	n := backlogs.Add(1)
	topic := fmt.Sprintf("projects/%s/topics/bench-%d", client.Project(), n)
	sub := fmt.Sprintf("projects/%s/subscriptions/bench-%d", client.Project(), n)
	if _, err := client.TopicAdminClient.CreateTopic(ctx, &pubsubpb.Topic{Name: topic}); err != nil {
		b.Fatal(err)
	}
	if _, err := client.SubscriptionAdminClient.CreateSubscription(ctx, &pubsubpb.Subscription{Name: sub, Topic: topic, EnableMessageOrdering: true}); err != nil {
		b.Fatal(err)
	}
	p, err := publisher.New(client, topic)
	if err != nil {
		b.Fatal(err)
	}
	publish(p)
	if err := p.Close(ctx); err != nil {
		b.Fatal(err)
	}
	return sub
}

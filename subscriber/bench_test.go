package subscriber_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"cloud.google.com/go/pubsub/v2"
	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/keyorder/keyorder/internal/harness"
	"github.com/keyorder/keyorder/ordering/orderingtest"
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

	backlog := keyedBacklog(client, keys, perKey)
	measure := func(b *testing.B, receive receiveFunc) { measureReceive(b, keys*perKey, backlog, receive) }

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

// keyedBacklog returns a function that creates an ordered subscription
// holding perKey messages of each of keys keys, published key after key in
// turn.
func keyedBacklog(client *pubsub.Client, keys, perKey int) func(b *testing.B) string {
	return func(b *testing.B) string {
		return newBacklog(b, client, func(p *publisher.Publisher) {
			for i := 0; i < perKey; i++ {
				for k := 0; k < keys; k++ {
					p.Publish(context.Background(), &publisher.Message{Data: []byte("payload")}, publisher.WithOrderingKey(fmt.Sprintf("customer-%d", k)))
				}
			}
		})
	}
}

// receiveFunc receives sub until ctx ends, calling handled once per
// message processed.
type receiveFunc func(ctx context.Context, sub string, handled func()) error

// measureReceive runs receive over a fresh backlog of n messages for each
// round and reports the rate, from Receive's start to the n-th message
// processed; the shutdown that follows is not timed.
func measureReceive(b *testing.B, n int, backlog func(b *testing.B) string, receive receiveFunc) {
	var total time.Duration
	var msgs int
	for b.Loop() {
		b.StopTimer()
		sub := backlog(b)
		rctx, cancel := context.WithCancel(context.Background())
		var count atomic.Int64
		all := make(chan struct{})
		done := make(chan error, 1)
		b.StartTimer()
		start := time.Now()
		go func() {
			done <- receive(rctx, sub, func() {
				if count.Add(1) == int64(n) {
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
		msgs += n
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

// BenchmarkHandlers compares keyorder's Receive with the official
// client's, each at its default settings, for the two kinds of handler a
// service has: one that waits on I/O for 5 ms (a database write, an HTTP
// call) and one that computes for 200 µs. The backlog is 200 keys of 10
// messages on an ordered subscription of the faithful fake, so that at
// best a key's messages take 10 handler calls in a row. "keyorder-8" runs
// keyorder with WithWorkers(8), the default before it followed
// MaxOutstandingMessages.
func BenchmarkHandlers(b *testing.B) {
	const keys, perKey = 200, 10
	_, client := harness.Fake(b)
	backlog := keyedBacklog(client, keys, perKey)
	rounds := cpuRounds(200 * time.Microsecond)
	for _, kind := range []struct {
		name string
		work func()
	}{
		{"io", func() { time.Sleep(5 * time.Millisecond) }}, // the handler's wait on I/O
		{"cpu", func() { burn(rounds) }},
	} {
		b.Run("official/"+kind.name, func(b *testing.B) {
			measureReceive(b, keys*perKey, backlog, func(ctx context.Context, sub string, handled func()) error {
				return client.Subscriber(sub).Receive(ctx, func(_ context.Context, m *pubsub.Message) {
					kind.work()
					m.Ack()
					handled()
				})
			})
		})
		for _, side := range []struct {
			name string
			opts []subscriber.Option
		}{
			{"keyorder", nil},
			{"keyorder-8", []subscriber.Option{subscriber.WithWorkers(8)}},
		} {
			b.Run(side.name+"/"+kind.name, func(b *testing.B) {
				measureReceive(b, keys*perKey, backlog, func(ctx context.Context, sub string, handled func()) error {
					s, err := subscriber.Open(ctx, client, sub, side.opts...)
					if err != nil {
						return err
					}
					return s.Receive(ctx, func(context.Context, *subscriber.Delivery) error {
						kind.work()
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

// BenchmarkParkingLatency measures what parking costs a message of a key
// new to the process, the case its barrier is for: on the faithful fake
// with 25 ms added to each publish and each delivery, as on the service,
// a message of a new key is published every 10 ms to a running Receive,
// and the time from its Publish call to its handler call is taken. Keys
// are sparse: every message has a key of its own. "keyorder" receives
// without parking, "keyorder+parking" with it; p50 and p90 are the
// medians over the round's messages, and "ratio" is parking's p50 over
// the p50 without, taken in the same run.
func BenchmarkParkingLatency(b *testing.B) {
	const (
		latency = 25 * time.Millisecond
		every   = 10 * time.Millisecond
		msgs    = 200
	)
	_, client := harness.Fake(b, orderingtest.WithLatency(latency))
	ctx := context.Background()
	round := func(b *testing.B, opts ...subscriber.Option) []time.Duration {
		sub := newBacklog(b, client, func(*publisher.Publisher) {})
		s, err := subscriber.Open(ctx, client, sub, opts...)
		if err != nil {
			b.Fatal(err)
		}
		var mu sync.Mutex
		sent := map[string]time.Time{}
		took := make([]time.Duration, 0, msgs)
		up, all := make(chan struct{}), make(chan struct{})
		rctx, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() {
			done <- s.Receive(rctx, func(_ context.Context, d *subscriber.Delivery) error {
				if d.Key == "warm-up" {
					close(up)
					return nil
				}
				mu.Lock()
				defer mu.Unlock()
				took = append(took, time.Since(sent[d.Key]))
				if len(took) == msgs {
					close(all)
				}
				return nil
			})
		}()
		p, err := publisher.New(client, s.Topic())
		if err != nil {
			b.Fatal(err)
		}
		// A first message, and its handler call, say the Receive is up,
		// its control log replayed: only then is the clock started.
		p.Publish(ctx, &publisher.Message{Data: []byte("x")}, publisher.WithOrderingKey("warm-up"))
		select {
		case <-up:
		case err := <-done:
			b.Fatalf("Receive returned early: %v", err)
		}
		tick := time.NewTicker(every)
		for i := 0; i < msgs; i++ {
			key := fmt.Sprintf("sparse-%d", i)
			mu.Lock()
			sent[key] = time.Now()
			mu.Unlock()
			p.Publish(ctx, &publisher.Message{Data: []byte("x")}, publisher.WithOrderingKey(key))
			<-tick.C
		}
		tick.Stop()
		select {
		case <-all:
		case err := <-done:
			b.Fatalf("Receive returned early: %v", err)
		case <-time.After(time.Minute):
			b.Fatal("not every message was handled")
		}
		cancel()
		if err := <-done; err != nil {
			b.Fatal(err)
		}
		if err := p.Close(ctx); err != nil {
			b.Fatal(err)
		}
		mu.Lock()
		defer mu.Unlock()
		slices.Sort(took)
		return took
	}
	var ratios []float64
	for b.Loop() {
		without := round(b)
		with := round(b, subscriber.WithParking("bench-latency-parked"))
		ratios = append(ratios, float64(with[len(with)/2])/float64(without[len(without)/2]))
		b.ReportMetric(float64(without[len(without)/2].Milliseconds()), "p50-ms")
		b.ReportMetric(float64(with[len(with)/2].Milliseconds()), "p50-parking-ms")
		b.ReportMetric(float64(with[len(with)*9/10].Milliseconds()), "p90-parking-ms")
	}
	slices.Sort(ratios)
	b.ReportMetric(ratios[len(ratios)/2], "ratio")
	b.ReportMetric(0, "ns/op")
}

package orderingtest_test

import (
	"context"
	"flag"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"cloud.google.com/go/pubsub/v2"
	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"

	"github.com/keyorder/keyorder/internal/harness"
	"github.com/keyorder/keyorder/ordering/orderingtest"
)

// pstestPerKey sizes the pstest side of BenchmarkOrderedReceive. pstest
// delivers under 100 messages a second, so the full 50 per key takes more
// than two minutes per iteration; 5 keeps `make bench` bearable. A smaller
// backlog only flatters pstest, whose ticker scans the whole backlog. Run
// the full size with
//
//	go test -run='^$' -bench=OrderedReceive -benchtime=1x ./ordering/orderingtest -args -pstest-per-key=50
var pstestPerKey = flag.Int("pstest-per-key", 5, "messages per key in BenchmarkOrderedReceive/pstest")

// BenchmarkOrderedReceive measures ordered receive through the official
// client with default ReceiveSettings: 200 keys, published before the
// clock starts, received and acked until every message has been handled.
//
// With default settings orderingtest is bound by flow control, as the service
// would be: at most 1000 messages outstanding per stream (the client's
// MaxOutstandingMessages), and the client sends acks every 100 ms, so about
// 10,000 messages a second. The "unlimited" case lifts the limit to show
// the fake's own cost.
func BenchmarkOrderedReceive(b *testing.B) {
	const nkeys = 200
	rates := map[string]float64{}
	unlimited := pubsub.DefaultReceiveSettings
	unlimited.MaxOutstandingMessages = -1
	for _, c := range []struct {
		name     string
		perKey   int
		client   func(testing.TB) *pubsub.Client
		settings pubsub.ReceiveSettings
	}{
		{"pstest", *pstestPerKey, pstestClient, pubsub.DefaultReceiveSettings},
		{"orderingtest", 50, fakeClient, pubsub.DefaultReceiveSettings},
		{"orderingtest-unlimited", 50, fakeClient, unlimited},
	} {
		b.Run(c.name, func(b *testing.B) {
			client := c.client(b)
			var elapsed time.Duration
			for i := 0; i < b.N; i++ {
				b.StopTimer()
				sub := orderedBacklog(b, client, i, keys(nkeys), c.perKey)
				b.StartTimer()
				elapsed += receiveAll(b, client, sub, c.settings, nkeys*c.perKey)
			}
			rate := float64(b.N*nkeys*c.perKey) / elapsed.Seconds()
			rates[c.name] = rate
			b.ReportMetric(rate, "msgs/s")
		})
	}
	if rates["pstest"] > 0 && rates["orderingtest"] > 0 {
		// Printed with -v.
		b.Logf("orderingtest receives %.0fx as many messages per second as pstest", rates["orderingtest"]/rates["pstest"])
	}
}

func pstestClient(t testing.TB) *pubsub.Client { _, c := harness.Pstest(t); return c }
func fakeClient(t testing.TB) *pubsub.Client   { _, c := harness.Fake(t); return c }

// orderedBacklog creates a topic and an ordered subscription, publishes
// perKey messages for each key, and returns the subscription's name.
func orderedBacklog(b *testing.B, client *pubsub.Client, i int, ks []string, perKey int) string {
	ctx := context.Background()
	topic, err := client.TopicAdminClient.CreateTopic(ctx, &pubsubpb.Topic{Name: topicName(fmt.Sprintf("bench-%d", i))})
	if err != nil {
		b.Fatal(err)
	}
	sub, err := client.SubscriptionAdminClient.CreateSubscription(ctx, &pubsubpb.Subscription{
		Name: subName(fmt.Sprintf("bench-%d", i)), Topic: topic.Name, EnableMessageOrdering: true,
	})
	if err != nil {
		b.Fatal(err)
	}
	p := client.Publisher(topic.Name)
	defer p.Stop()
	p.EnableMessageOrdering = true
	var results []*pubsub.PublishResult
	for seq := 1; seq <= perKey; seq++ {
		for _, k := range ks {
			results = append(results, p.Publish(ctx, &pubsub.Message{Data: []byte(payload(k, seq)), OrderingKey: k}))
		}
	}
	for _, r := range results {
		if _, err := r.Get(ctx); err != nil {
			b.Fatal(err)
		}
	}
	return sub.Name
}

// receiveAll receives until n messages have been handled and returns how
// long that took, not counting Receive's shutdown.
func receiveAll(b *testing.B, client *pubsub.Client, sub string, settings pubsub.ReceiveSettings, n int) time.Duration {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var handled atomic.Int64
	all := make(chan struct{})
	start := time.Now()
	var took time.Duration
	done := make(chan error, 1)
	go func() {
		s := client.Subscriber(sub)
		s.ReceiveSettings = settings
		done <- s.Receive(ctx, func(_ context.Context, m *pubsub.Message) {
			m.Ack()
			if handled.Add(1) == int64(n) {
				close(all)
			}
		})
	}()
	select {
	case <-all:
		took = time.Since(start)
	case err := <-done:
		b.Fatalf("Receive returned early: %v", err)
	}
	b.StopTimer()
	cancel()
	if err := <-done; err != nil {
		b.Fatal(err)
	}
	return took
}

// BenchmarkLatency measures publish-to-handler round trips through the
// official client on a server with and without WithLatency: bursts of
// messages on as many keys, each published by a Publish call of its own,
// all at once, and received by one Receive. With latency d a burst takes
// about 2d whatever its size, since latency delays and does not serialise;
// ns/op is the time of one burst.
func BenchmarkLatency(b *testing.B) {
	for _, d := range []time.Duration{0, 25 * time.Millisecond} {
		for _, burst := range []int{1, 100} {
			b.Run(fmt.Sprintf("latency=%v/burst=%d", d, burst), func(b *testing.B) {
				f := newFixture(b, nil, orderingtest.WithLatency(d))
				got := make(chan struct{}, burst)
				f.receive(f.sub, nil, func(_ context.Context, m *pubsub.Message) {
					m.Ack()
					got <- struct{}{}
				})
				f.waitFor("a stream", func() bool { return f.srv.Stats(f.sub).Streams > 0 })
				b.ResetTimer()
				for i := 0; i < b.N; i++ {
					var wg sync.WaitGroup
					for k := range burst {
						wg.Add(1)
						go func() {
							defer wg.Done()
							key := fmt.Sprint("k", k)
							_, err := f.client.TopicAdminClient.Publish(f.ctx, &pubsubpb.PublishRequest{
								Topic:    f.topic,
								Messages: []*pubsubpb.PubsubMessage{{Data: []byte(payload(key, i+1)), OrderingKey: key}},
							})
							if err != nil {
								b.Error(err)
							}
						}()
					}
					for range burst {
						recv(b, got, "a message of the burst")
					}
					wg.Wait()
				}
				b.ReportMetric(float64(b.N*burst)/b.Elapsed().Seconds(), "msgs/s")
			})
		}
	}
}

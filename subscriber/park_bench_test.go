package subscriber_test

import (
	"context"
	"fmt"
	"sort"
	"sync/atomic"
	"testing"
	"time"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"

	"github.com/keyorder/keyorder/internal/harness"
	"github.com/keyorder/keyorder/publisher"
	"github.com/keyorder/keyorder/subscriber"
)

// BenchmarkParkingIsolation measures what a poison key costs the other
// keys (S9) when it parks, beside the default policy, which holds it. The
// backlog is BenchmarkIsolation's: 400 good keys of 10 messages, each
// taking 200 µs of CPU, with a poison key's 40 messages among them, whose
// handler returns Permanent; WithWorkers(16).
//
// Each round times how long the good messages take from Receive's start,
// on a backlog without the poison key and on one with it. "ratio" is the
// median of the rounds' time without over time with: 1.0 means the poison
// key cost the others nothing. "s-without" of "parking" against "hold"
// is what parking costs a healthy backlog: the barrier each key newly
// seen waits for.
func BenchmarkParkingIsolation(b *testing.B) {
	const (
		goodKeys = 400
		perKey   = 10
		badMsgs  = 40
		work     = 200 * time.Microsecond
	)
	_, client := harness.Fake(b)
	ctx := context.Background()
	var seq atomic.Int64

	backlog := func(b *testing.B, bad bool) string {
		b.Helper()
		n := seq.Add(1)
		topic := fmt.Sprintf("projects/%s/topics/parking-isolation-%d", client.Project(), n)
		sub := fmt.Sprintf("projects/%s/subscriptions/parking-isolation-%d", client.Project(), n)
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
		every := goodKeys * perKey / badMsgs
		for i := 0; i < goodKeys*perKey; i++ {
			p.Publish(ctx, &publisher.Message{Data: []byte("good")}, publisher.WithOrderingKey(fmt.Sprintf("key-%d", i%goodKeys)))
			if bad && i%every == every-1 {
				p.Publish(ctx, &publisher.Message{Data: []byte("bad")}, publisher.WithOrderingKey("bad-key"))
			}
		}
		if err := p.Close(ctx); err != nil {
			b.Fatal(err)
		}
		return sub
	}
	spin := func(d time.Duration) {
		for end := time.Now().Add(d); time.Now().Before(end); {
		}
	}
	goodTime := func(b *testing.B, sub string, opts []subscriber.Option) time.Duration {
		s, err := subscriber.Open(ctx, client, sub, opts...)
		if err != nil {
			b.Fatal(err)
		}
		rctx, cancel := context.WithCancel(ctx)
		var n atomic.Int64
		all := make(chan struct{})
		done := make(chan error, 1)
		start := time.Now()
		go func() {
			done <- s.Receive(rctx, func(_ context.Context, d *subscriber.Delivery) error {
				spin(work)
				if d.Key == "bad-key" {
					return subscriber.Permanent(errInjected)
				}
				if n.Add(1) == goodKeys*perKey {
					close(all)
				}
				return nil
			})
		}()
		select {
		case <-all:
		case err := <-done:
			b.Fatalf("Receive returned early: %v", err)
		}
		elapsed := time.Since(start)
		cancel()
		if err := <-done; err != nil {
			b.Fatal(err)
		}
		return elapsed
	}

	for _, policy := range []struct {
		name string
		opts []subscriber.Option
	}{
		{"hold", nil},
		{"parking", []subscriber.Option{subscriber.WithParking("parking-isolation-parked")}},
	} {
		opts := append([]subscriber.Option{subscriber.WithWorkers(16), subscriber.WithDrainTimeout(10 * time.Millisecond)}, policy.opts...)
		b.Run(policy.name, func(b *testing.B) {
			var ratios []float64
			var clean, dirty time.Duration
			for b.Loop() {
				b.StopTimer()
				cleanSub, badSub := backlog(b, false), backlog(b, true)
				b.StartTimer()
				c := goodTime(b, cleanSub, opts)
				d := goodTime(b, badSub, opts)
				clean += c
				dirty += d
				ratios = append(ratios, c.Seconds()/d.Seconds())
			}
			sort.Float64s(ratios)
			b.ReportMetric(ratios[len(ratios)/2], "ratio")
			b.ReportMetric(clean.Seconds()/float64(len(ratios)), "s-without")
			b.ReportMetric(dirty.Seconds()/float64(len(ratios)), "s-with")
			b.ReportMetric(0, "ns/op")
		})
	}
}

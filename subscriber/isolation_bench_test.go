package subscriber_test

import (
	"context"
	"fmt"
	"math/rand"
	"sort"
	"sync/atomic"
	"testing"
	"time"

	"cloud.google.com/go/pubsub/v2"

	"github.com/keyorder/keyorder/internal/harness"
	"github.com/keyorder/keyorder/publisher"
	"github.com/keyorder/keyorder/subscriber"
)

// BenchmarkIsolation measures what one bad key costs the others (S9), for
// keyorder's Receive and, beside it in the same run, the official client's.
//
// The backlog is 400 good keys with 10 messages each on average, every
// message taking 200 µs of CPU, and a bad key, "bad-key", with 40 messages
// published in among them. Keys are uniform (every key 10 messages) or
// Zipf-distributed (a few hot keys, many cold ones). The bad key either
// always fails ("poison": keyorder's handler returns an error, the
// official callback nacks) or takes 300 ms per message ("slow"). keyorder
// runs with WithWorkers(16) and otherwise default settings.
//
// Each round times how long every good message takes to be processed,
// from Receive's start, on a backlog without the bad key and on one with
// it. "ratio" is the median of the rounds' time without over time with:
// 1.0 means the bad key cost the others nothing.
func BenchmarkIsolation(b *testing.B) {
	const (
		goodKeys = 400
		perKey   = 10
		badMsgs  = 40
		work     = 200 * time.Microsecond
		slow     = 300 * time.Millisecond
	)
	_, client := harness.Fake(b)
	ctx := context.Background()

	// backlog publishes the good messages, and the bad key's among them if
	// bad, to a new ordered subscription, and returns it.
	backlog := func(b *testing.B, keys []string, bad bool) string {
		return newBacklog(b, client, func(p *publisher.Publisher) {
			every := len(keys) / badMsgs
			for i, k := range keys {
				p.Publish(ctx, &publisher.Message{Data: []byte("good")}, publisher.WithOrderingKey(k))
				if bad && i%every == every-1 {
					p.Publish(ctx, &publisher.Message{Data: []byte("bad")}, publisher.WithOrderingKey("bad-key"))
				}
			}
		})
	}

	// spin does a handler's own work: a fixed amount of computation that
	// takes d of CPU on this machine, measured once. A loop on the clock
	// would finish early whenever the goroutine is preempted, and favour
	// whichever side runs more handlers at once.
	rounds := cpuRounds(work)
	spin := func() { burn(rounds) }

	type badKind struct {
		name string
		// official and keyorder handle one message of the bad key.
		official func(m *pubsub.Message)
		keyorder func(ctx context.Context) error
	}
	kinds := []badKind{
		{
			name:     "poison",
			official: func(m *pubsub.Message) { spin(); m.Nack() },
			keyorder: func(context.Context) error { spin(); return errInjected },
		},
		{
			name: "slow",
			official: func(m *pubsub.Message) {
				<-time.After(slow) // the handler's work: a slow downstream call
				m.Ack()
			},
			keyorder: func(ctx context.Context) error {
				select {
				case <-time.After(slow):
				case <-ctx.Done():
				}
				return nil
			},
		},
	}

	// A receiver processes sub until every good message is processed,
	// calling good for each, and returns once ctx ends.
	type receiver func(ctx context.Context, sub string, bad badKind, good func()) error
	keyorder := func(opts []subscriber.Option) receiver {
		opts = append([]subscriber.Option{subscriber.WithWorkers(16), subscriber.WithDrainTimeout(10 * time.Millisecond)}, opts...)
		return func(ctx context.Context, sub string, bad badKind, good func()) error {
			s, err := subscriber.Open(ctx, client, sub, opts...)
			if err != nil {
				return err
			}
			return s.Receive(ctx, func(ctx context.Context, d *subscriber.Delivery) error {
				if d.Key == "bad-key" {
					return bad.keyorder(ctx)
				}
				spin()
				good()
				return nil
			})
		}
	}
	receivers := []struct {
		name string
		recv receiver
	}{
		{"official", func(ctx context.Context, sub string, bad badKind, good func()) error {
			s := client.Subscriber(sub)
			return s.Receive(ctx, func(_ context.Context, m *pubsub.Message) {
				if m.OrderingKey == "bad-key" {
					bad.official(m)
					return
				}
				spin()
				m.Ack()
				good()
			})
		}},
		{"keyorder", keyorder(nil)},
		// The poison key parks instead of being held (WithParking); a
		// slow key is not parked, but every key newly seen waits for the
		// barrier of parking's control log.
		{"keyorder+parking", keyorder([]subscriber.Option{subscriber.WithParking("isolation-parked"), subscriber.WithParkingWait(10 * time.Millisecond)})},
	}

	// goodTime receives sub until its goodCount good messages are
	// processed, and returns how long that took.
	goodTime := func(b *testing.B, recv receiver, sub string, bad badKind, goodCount int) time.Duration {
		rctx, cancel := context.WithCancel(ctx)
		var n atomic.Int64
		all := make(chan struct{})
		done := make(chan error, 1)
		start := time.Now()
		go func() {
			done <- recv(rctx, sub, bad, func() {
				if n.Add(1) == int64(goodCount) {
					close(all)
				}
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

	for _, dist := range []struct {
		name string
		keys func() []string // the key of each good message, in publish order
	}{
		{"uniform", func() []string {
			var keys []string
			for i := 0; i < perKey; i++ {
				for k := 0; k < goodKeys; k++ {
					keys = append(keys, fmt.Sprintf("key-%d", k))
				}
			}
			return keys
		}},
		{"zipf", func() []string {
			z := rand.NewZipf(rand.New(rand.NewSource(1)), 1.1, 1, goodKeys-1)
			keys := make([]string, goodKeys*perKey)
			for i := range keys {
				keys[i] = fmt.Sprintf("key-%d", z.Uint64())
			}
			return keys
		}},
	} {
		keys := dist.keys()
		for _, bad := range kinds {
			for _, r := range receivers {
				b.Run(bad.name+"/"+dist.name+"/"+r.name, func(b *testing.B) {
					var ratios []float64
					var clean, dirty time.Duration
					for b.Loop() {
						b.StopTimer()
						cleanSub, badSub := backlog(b, keys, false), backlog(b, keys, true)
						b.StartTimer()
						c := goodTime(b, r.recv, cleanSub, bad, len(keys))
						d := goodTime(b, r.recv, badSub, bad, len(keys))
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
	}
}

// sink keeps burn's result alive.
var sink atomic.Uint64

// burn does n rounds of arithmetic that cannot be optimised away.
func burn(n int) {
	x := uint64(n)
	for i := 0; i < n; i++ {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
	}
	sink.Add(x)
}

// cpuRounds returns how many rounds of burn take d on this machine: the
// fastest of several trials, the one least disturbed by other work.
func cpuRounds(d time.Duration) int {
	const probe = 1 << 20
	best := time.Duration(1<<63 - 1)
	for i := 0; i < 7; i++ {
		start := time.Now()
		burn(probe)
		best = min(best, time.Since(start))
	}
	return max(1, int(float64(probe)*d.Seconds()/best.Seconds()))
}

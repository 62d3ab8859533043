package publisher_test

import (
	"context"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"cloud.google.com/go/pubsub/v2"
	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"google.golang.org/api/option"
	"google.golang.org/grpc"

	"github.com/keyorder/keyorder/internal/harness"
	"github.com/keyorder/keyorder/ordering/orderingtest"
	"github.com/keyorder/keyorder/publisher"
)

// BenchmarkPublishLatency publishes where users do: on a server that
// answers each Publish 25 ms after it arrives (orderingtest.WithLatency).
// Each op is one round of each side, in turns that rotate from op to op
// so that every side meets the same load: a burst of 50 messages on each
// of 200 keys, published round-robin with default settings and waited for.
// Run it with a fixed count of rounds, such as -benchtime=20x.
//
// With default settings a key's next batch gathers while its previous one
// is in flight, so a burst takes about as many round trips as its key's
// messages need batches: a Publish loop that spends more per message
// spreads each key over more, smaller batches. msgs/rpc shows it.
//
// Each side reports its msgs/s, msgs/rpc and median round; ratio-<side> is
// the median, over the ops, of the side's speed over the official client's
// in the same op.
func BenchmarkPublishLatency(b *testing.B) {
	const keys, perKey = 200, 50
	var rpcs atomic.Int64
	count := option.WithGRPCDialOption(grpc.WithUnaryInterceptor(func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		if _, ok := req.(*pubsubpb.PublishRequest); ok {
			rpcs.Add(1)
		}
		return invoker(ctx, method, req, reply, cc, opts...)
	}))
	srv := orderingtest.Start(b, orderingtest.WithLatency(25*time.Millisecond))
	client := harness.Client(b, srv.Addr, count)
	ctx := context.Background()
	topic := newTopic(b, client)
	names := keyNames(keys, "customer-%d")
	data := make([]byte, 128)
	headers := map[string]string{"kind": "order-created"}

	official := client.Publisher(topic)
	official.EnableMessageOrdering = true
	defer official.Stop()
	newPublisher := func(opts ...publisher.Option) *publisher.Publisher {
		p, err := publisher.New(client, topic, opts...)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = p.Close(ctx) })
		return p
	}
	keyorderRound := func(p *publisher.Publisher) func() {
		results := make([]*publisher.Result, keys*perKey)
		return func() {
			for i := range results {
				results[i] = p.Publish(ctx, &publisher.Message{Data: data, Headers: headers}, publisher.WithOrderingKey(names[i%keys]))
			}
			waitAll(b, results)
		}
	}
	officialResults := make([]*pubsub.PublishResult, keys*perKey)
	sides := []struct {
		name  string
		round func()
	}{
		{"official", func() {
			for i := range officialResults {
				officialResults[i] = official.Publish(ctx, &pubsub.Message{Data: data, Attributes: headers, OrderingKey: names[i%keys]})
			}
			waitAll(b, officialResults)
		}},
		{"keyorder", keyorderRound(newPublisher())},
		{"keyorder-unstamped", keyorderRound(newPublisher(publisher.WithoutStamps()))},
	}

	took := make([][]time.Duration, len(sides))
	sent := make([]int64, len(sides))
	op := 0
	for b.Loop() {
		for turn := range sides {
			side := (op + turn) % len(sides)
			rpcs.Store(0)
			start := time.Now()
			sides[side].round()
			took[side] = append(took[side], time.Since(start))
			sent[side] += rpcs.Load()
		}
		op++
	}
	msgs := float64(keys * perKey)
	for side, s := range sides {
		var total time.Duration
		for _, d := range took[side] {
			total += d
		}
		b.ReportMetric(msgs*float64(op)/total.Seconds(), s.name+"-msgs/s")
		b.ReportMetric(msgs*float64(op)/float64(sent[side]), s.name+"-msgs/rpc")
		b.ReportMetric(float64(median(took[side]))/1e6, s.name+"-ms/round")
		if side > 0 {
			ratios := make([]time.Duration, op)
			for i := range ratios {
				// In thousandths, to sort as durations.
				ratios[i] = took[0][i] * 1000 / took[side][i]
			}
			b.ReportMetric(float64(median(ratios))/1000, fmt.Sprintf("ratio-%s", s.name))
		}
	}
}

// waitAll waits for every result and fails b on an error.
func waitAll[R interface {
	Get(context.Context) (string, error)
}](b *testing.B, results []R) {
	for _, r := range results {
		if _, err := r.Get(context.Background()); err != nil {
			b.Fatal(err)
		}
	}
}

// median returns the median of ds, leaving ds as it was.
func median(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Sorted(slices.Values(ds))
	return s[len(s)/2]
}

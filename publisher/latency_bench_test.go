package publisher_test

import (
	"context"
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
// A round is a burst of 50 messages on each of 200 keys, published
// round-robin with default settings and waited for; each op is a round of
// the official client, the official client carrying a stamp made by hand,
// keyorder stamped and keyorder unstamped, in turns (see takeTurns), with
// ratios as in BenchmarkPublishPaired. Run it with a fixed count of ops, such as
// -benchtime=20x.
//
// With default settings a key's next batch gathers while its previous one
// is in flight, so a burst takes as many round trips as its keys'
// messages need batches: a Publish loop that spends more per message
// spreads each key over more, smaller batches, which msgs/rpc shows.
func BenchmarkPublishLatency(b *testing.B) {
	const keys, perKey = 200, 50
	client, topic, rpcs := latencyServer(b, 25*time.Millisecond)
	names := keyNames(keys, "customer-%d")
	headers := map[string]string{"kind": "order-created"}

	official := client.Publisher(topic)
	official.EnableMessageOrdering = true
	defer official.Stop()
	newPublisher := func(opts ...publisher.Option) *publisher.Publisher {
		p, err := publisher.New(client, topic, opts...)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = p.Close(context.Background()) })
		return p
	}
	officialStamped := client.Publisher(topic)
	officialStamped.EnableMessageOrdering = true
	defer officialStamped.Stop()
	n := keys * perKey
	keyorder := keyorderSide(b, "keyorder", newPublisher(), n, names)
	keyorder.base = "official-stamped"
	takeTurns(b, n, rpcs, []side{
		officialSide(b, "official", official, n, names, func(int) map[string]string { return headers }),
		officialSide(b, "official-stamped", officialStamped, n, names, stampedBy(keys, headers)),
		keyorder,
		keyorderSide(b, "keyorder-unstamped", newPublisher(publisher.WithoutStamps()), n, names),
	})
}

// latencyServer starts a fake server that answers each request latency
// later, and returns a client of it, a topic, and the count of Publish
// requests the client sends.
func latencyServer(b *testing.B, latency time.Duration) (*pubsub.Client, string, *atomic.Int64) {
	rpcs := new(atomic.Int64)
	count := option.WithGRPCDialOption(grpc.WithUnaryInterceptor(func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		if _, ok := req.(*pubsubpb.PublishRequest); ok {
			rpcs.Add(1)
		}
		return invoker(ctx, method, req, reply, cc, opts...)
	}))
	srv := orderingtest.Start(b, orderingtest.WithLatency(latency))
	client := harness.Client(b, srv.Addr, count)
	return client, newTopic(b, client), rpcs
}

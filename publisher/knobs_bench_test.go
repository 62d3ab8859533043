package publisher_test

import (
	"context"
	"testing"
	"time"

	"cloud.google.com/go/pubsub/v2"

	"github.com/keyorder/keyorder/publisher"
)

// BenchmarkPublishKnobs tests, on the latency shapes of
// BenchmarkPublishShapes, what the publisher's own knobs change: its
// linger (the default cap of 5 ms, none, and 20 ms) and its bound on
// requests in flight (the default, 100 per connection, against 400 and
// 1,000), beside the official client at its defaults and the ideal side
// (idealSide). Every side but the official client is stamped, as by
// default. Run it with a fixed count of ops, such as -benchtime=5x.
func BenchmarkPublishKnobs(b *testing.B) {
	for _, sh := range []struct {
		name         string
		keys, perKey int
	}{
		{"burst", 200, 50},
		{"hot", 1, 5000},
		{"wide", 10_000, 1},
	} {
		b.Run(sh.name, func(b *testing.B) {
			client, topic, rpcs := latencyServer(b, 25*time.Millisecond)
			names := keyNames(sh.keys, "customer-%d")
			n := sh.keys * sh.perKey
			pub := client.Publisher(topic)
			pub.EnableMessageOrdering = true
			b.Cleanup(pub.Stop)
			newP := func(f func(*publisher.Publisher), opts ...publisher.Option) *publisher.Publisher {
				p, err := publisher.New(client, topic, opts...)
				if err != nil {
					b.Fatal(err)
				}
				if f != nil {
					f(p)
				}
				b.Cleanup(func() { _ = p.Close(context.Background()) })
				return p
			}
			set := func(delay time.Duration, goroutines int) publisher.Option {
				s := pubsub.DefaultPublishSettings
				s.CountThreshold, s.ByteThreshold = 0, 0
				s.DelayThreshold, s.NumGoroutines = delay, goroutines
				return publisher.WithPublishSettings(s)
			}
			headers := map[string]string{"kind": "order-created"}
			sides := []side{
				officialSide(b, "official", pub, n, names, func(int) map[string]string { return headers }),
				keyorderSide(b, "keyorder", newP(nil), n, names),
				keyorderSide(b, "keyorder-nolinger", newP(nil, set(0, 0)), n, names),
				keyorderSide(b, "keyorder-linger20", newP(func(p *publisher.Publisher) { publisher.SetLingerMax(p, 20*time.Millisecond) }), n, names),
				keyorderSide(b, "keyorder-400", newP(nil, set(10*time.Millisecond, 400)), n, names),
				keyorderSide(b, "keyorder-1000", newP(nil, set(10*time.Millisecond, 1000)), n, names),
				idealSide(b, client, topic, n, names),
			}
			ratioAll(b, sides, takeTurns(b, n, rpcs, sides))
		})
	}
}

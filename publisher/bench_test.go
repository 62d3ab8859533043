package publisher_test

import (
	"context"
	"fmt"
	"testing"

	"cloud.google.com/go/pubsub/v2"

	"github.com/keyorder/keyorder/publisher"
)

// BenchmarkPublish compares keyorder's Publisher with the official client
// it wraps, on one pstest server that answers without storing. Each op is
// one message, published round-robin over 1000 ordering keys with default
// settings and waited for. The two sub-benchmarks share the server, so
// their ratio is what keyorder costs.
func BenchmarkPublish(b *testing.B) {
	const keys = 1000
	e := newEnv(b, discardPublishes())
	ctx := context.Background()
	names := make([]string, keys)
	for i := range names {
		names[i] = fmt.Sprintf("customer-%d", i)
	}
	data := make([]byte, 128)
	headers := map[string]string{"kind": "order-created"}

	b.Run("official", func(b *testing.B) {
		pub := e.client.Publisher(e.topic)
		pub.EnableMessageOrdering = true
		defer pub.Stop()
		results := make([]*pubsub.PublishResult, 0, b.N)
		b.ReportAllocs()
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			results = append(results, pub.Publish(ctx, &pubsub.Message{Data: data, Attributes: headers, OrderingKey: names[i%keys]}))
		}
		for _, r := range results {
			if _, err := r.Get(ctx); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
	})

	b.Run("keyorder", func(b *testing.B) {
		p, err := publisher.New(e.client, e.topic)
		if err != nil {
			b.Fatal(err)
		}
		defer func() { _ = p.Close(ctx) }()
		results := make([]*publisher.Result, 0, b.N)
		b.ReportAllocs()
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			results = append(results, p.Publish(ctx, &publisher.Message{Data: data, Headers: headers}, publisher.WithOrderingKey(names[i%keys])))
		}
		for _, r := range results {
			if _, err := r.Get(ctx); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
	})
}

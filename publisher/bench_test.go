package publisher_test

import (
	"context"
	"testing"
	"time"

	"cloud.google.com/go/pubsub/v2"

	"github.com/keyorder/keyorder/publisher"
)

// BenchmarkPublish compares keyorder's Publisher with the official client
// it wraps, on one pstest server that answers without storing. Each op is
// one message, published round-robin over 1000 ordering keys with default
// settings and waited for. The two sub-benchmarks share the server.
//
// With default settings a key's batch fills while the key's previous batch
// is in flight, so batch size (msgs/rpc) follows the publisher's own speed:
// a little more CPU per message means smaller batches and more requests.
// The ratio here is therefore wider and noisier than keyorder's cost per
// message, which BenchmarkPublishBatches isolates.
//
// cpu-ns/msg is the CPU time the whole process spent per message, server
// and garbage collector included: it depends less than msgs/s on what
// else the machine runs.
func BenchmarkPublish(b *testing.B) {
	const keys = 1000
	e := newEnv(b, discardPublishes())
	ctx := context.Background()
	names := keyNames(keys, "customer-%d")
	data := make([]byte, 128)
	headers := map[string]string{"kind": "order-created"}

	b.Run("official", func(b *testing.B) {
		pub := e.client.Publisher(e.topic)
		pub.EnableMessageOrdering = true
		defer pub.Stop()
		results := make([]*pubsub.PublishResult, 0, b.N)
		b.ReportAllocs()
		publishRPCs.Store(0)
		b.ResetTimer()
		cpu := processCPU()
		for i := 0; i < b.N; i++ {
			results = append(results, pub.Publish(ctx, &pubsub.Message{Data: data, Attributes: headers, OrderingKey: names[i%keys]}))
		}
		for _, r := range results {
			if _, err := r.Get(ctx); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
		b.ReportMetric(float64(b.N)/float64(publishRPCs.Swap(0)), "msgs/rpc")
		b.ReportMetric(float64(processCPU()-cpu)/float64(b.N), "cpu-ns/msg")
	})

	b.Run("keyorder", func(b *testing.B) {
		p, err := publisher.New(e.client, e.topic)
		if err != nil {
			b.Fatal(err)
		}
		defer func() { _ = p.Close(ctx) }()
		results := make([]*publisher.Result, 0, b.N)
		b.ReportAllocs()
		publishRPCs.Store(0)
		b.ResetTimer()
		cpu := processCPU()
		for i := 0; i < b.N; i++ {
			results = append(results, p.Publish(ctx, &publisher.Message{Data: data, Headers: headers}, publisher.WithOrderingKey(names[i%keys])))
		}
		for _, r := range results {
			if _, err := r.Get(ctx); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
		b.ReportMetric(float64(b.N)/float64(publishRPCs.Swap(0)), "msgs/rpc")
		b.ReportMetric(float64(processCPU()-cpu)/float64(b.N), "cpu-ns/msg")
	})
}

// BenchmarkPublishBatches takes the official client's batching out of the
// comparison: each op publishes 10 messages to each of 1000 keys, with
// batches of exactly 10 messages and no delay threshold, so both sides send
// the same 1000 requests per op and differ only by what they spend per
// message. msgs/s is the figure to compare.
func BenchmarkPublishBatches(b *testing.B) {
	const keys, perKey = 1000, 10
	e := newEnv(b, discardPublishes())
	ctx := context.Background()
	names := keyNames(keys, "customer-%d")
	data := make([]byte, 128)
	headers := map[string]string{"kind": "order-created"}
	settings := pubsub.DefaultPublishSettings
	settings.CountThreshold = perKey
	settings.DelayThreshold = time.Hour

	b.Run("official", func(b *testing.B) {
		pub := e.client.Publisher(e.topic)
		pub.EnableMessageOrdering = true
		pub.PublishSettings = settings
		defer pub.Stop()
		results := make([]*pubsub.PublishResult, 0, keys*perKey)
		b.ReportAllocs()
		cpu := processCPU()
		for b.Loop() {
			results = results[:0]
			for i := 0; i < keys*perKey; i++ {
				results = append(results, pub.Publish(ctx, &pubsub.Message{Data: data, Attributes: headers, OrderingKey: names[i%keys]}))
			}
			for _, r := range results {
				if _, err := r.Get(ctx); err != nil {
					b.Fatal(err)
				}
			}
		}
		b.ReportMetric(float64(b.N*keys*perKey)/b.Elapsed().Seconds(), "msgs/s")
		b.ReportMetric(float64(processCPU()-cpu)/float64(b.N*keys*perKey), "cpu-ns/msg")
	})

	b.Run("keyorder", func(b *testing.B) {
		p, err := publisher.New(e.client, e.topic, publisher.WithPublishSettings(settings))
		if err != nil {
			b.Fatal(err)
		}
		defer func() { _ = p.Close(ctx) }()
		results := make([]*publisher.Result, 0, keys*perKey)
		b.ReportAllocs()
		cpu := processCPU()
		for b.Loop() {
			results = results[:0]
			for i := 0; i < keys*perKey; i++ {
				results = append(results, p.Publish(ctx, &publisher.Message{Data: data, Headers: headers}, publisher.WithOrderingKey(names[i%keys])))
			}
			for _, r := range results {
				if _, err := r.Get(ctx); err != nil {
					b.Fatal(err)
				}
			}
		}
		b.ReportMetric(float64(b.N*keys*perKey)/b.Elapsed().Seconds(), "msgs/s")
		b.ReportMetric(float64(processCPU()-cpu)/float64(b.N*keys*perKey), "cpu-ns/msg")
	})
}

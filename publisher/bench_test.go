package publisher_test

import (
	"context"
	"maps"
	"runtime"
	"testing"
	"time"

	"cloud.google.com/go/pubsub/v2"

	"github.com/keyorder/keyorder/ordering"
	"github.com/keyorder/keyorder/publisher"
)

// BenchmarkPublish compares keyorder's Publisher with the official client
// it wraps, on one pstest server that answers without storing. Each op is
// a burst of 100,000 messages, published round-robin over 1000 ordering
// keys with default settings and waited for. The sub-benchmarks share
// the server.
//
// With default settings a key's batch fills while the key's previous batch
// is in flight, so batch size (msgs/rpc) follows the publisher's own speed:
// a little more CPU per message means smaller batches and more requests.
// It follows the burst's size too, which is why the burst is fixed rather
// than b.N messages: b.N is set from each side's own speed, and a side
// found slower would publish smaller bursts, in smaller batches. The ratio
// here is wider and noisier than keyorder's cost per message, which
// BenchmarkPublishBatches isolates.
//
// cpu-ns/msg is the CPU time the whole process spent per message, server
// and garbage collector included: it depends less than msgs/s on what
// else the machine runs.
func BenchmarkPublish(b *testing.B) {
	const keys, burst = 1000, 100_000
	e := newEnv(b, discardPublishes())
	ctx := context.Background()
	names := keyNames(keys, "customer-%d")
	data := make([]byte, 128)
	headers := map[string]string{"kind": "order-created"}

	b.Run("official", func(b *testing.B) {
		pub := e.client.Publisher(e.topic)
		pub.EnableMessageOrdering = true
		defer pub.Stop()
		bursts(b, burst, func(i int) *pubsub.PublishResult {
			return pub.Publish(ctx, &pubsub.Message{Data: data, Attributes: headers, OrderingKey: names[i%keys]})
		})
	})

	keyorderSides(b, e, burst, names)
}

// keyorderSides runs keyorder as sub-benchmarks of b, publishing bursts
// of n messages to e's topic, message i with key names[i%len(names)], with
// opts: "keyorder", stamped as by default (S12), and "keyorder-unstamped",
// which shows what the stamp costs.
func keyorderSides(b *testing.B, e env, n int, names []string, opts ...publisher.Option) {
	ctx := context.Background()
	data := make([]byte, 128)
	headers := map[string]string{"kind": "order-created"}
	for _, bc := range []struct {
		name string
		opts []publisher.Option
	}{
		{"keyorder", opts},
		{"keyorder-unstamped", append(opts[:len(opts):len(opts)], publisher.WithoutStamps())},
	} {
		b.Run(bc.name, func(b *testing.B) {
			p, err := publisher.New(e.client, e.topic, bc.opts...)
			if err != nil {
				b.Fatal(err)
			}
			defer func() { _ = p.Close(ctx) }()
			bursts(b, n, func(i int) *publisher.Result {
				return p.Publish(ctx, &publisher.Message{Data: data, Headers: headers}, publisher.WithOrderingKey(names[i%len(names)]))
			})
		})
	}
}

// BenchmarkPublishBatches takes the official client's batching out of the
// comparison: each op publishes 10 messages to each of 1000 keys, with
// batches of exactly 10 messages and no delay threshold, so both sides send
// the same 1000 requests per op and differ only by what they spend per
// message. msgs/s is the figure to compare. The official client's messages
// carry the caller's header only; keyorder's also carry the stamp, unless
// unstamped.
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
		bursts(b, keys*perKey, func(i int) *pubsub.PublishResult {
			return pub.Publish(ctx, &pubsub.Message{Data: data, Attributes: headers, OrderingKey: names[i%keys]})
		})
	})

	// The official client with a stamp made by hand, as a caller without
	// keyorder would: what the stamp's attribute costs the client and the
	// server alone.
	b.Run("official-stamped", func(b *testing.B) {
		pub := e.client.Publisher(e.topic)
		pub.EnableMessageOrdering = true
		pub.PublishSettings = settings
		defer pub.Stop()
		seqs := make([]uint64, keys)
		bursts(b, keys*perKey, func(i int) *pubsub.PublishResult {
			attrs := make(map[string]string, len(headers)+ordering.StampAttributes)
			maps.Copy(attrs, headers)
			seqs[i%keys]++
			ordering.Stamp{Producer: "hhdykhhlphu4lp74gooygvqsmq", Seq: ordering.MakeSeq(1, uint32(seqs[i%keys]))}.Put(attrs)
			return pub.Publish(ctx, &pubsub.Message{Data: data, Attributes: attrs, OrderingKey: names[i%keys]})
		})
	})

	keyorderSides(b, e, keys*perKey, names, publisher.WithPublishSettings(settings))
}

// perMessage measures what a benchmark spends per message: make it with
// startPerMessage just before the loop, and report after it.
// bursts publishes, for each op, a burst of n messages, message i by
// publish(i), then waits for every result, and reports the figures per
// message.
func bursts[R interface {
	Get(context.Context) (string, error)
}](b *testing.B, n int, publish func(i int) R) {
	ctx := context.Background()
	results := make([]R, n)
	m := startPerMessage()
	for b.Loop() {
		for i := range results {
			results[i] = publish(i)
		}
		for _, r := range results {
			if _, err := r.Get(ctx); err != nil {
				b.Fatal(err)
			}
		}
	}
	m.report(b, b.N*n)
}

type perMessage struct {
	cpu time.Duration
	mem runtime.MemStats
}

func startPerMessage() perMessage {
	var m perMessage
	publishRPCs.Store(0)
	runtime.ReadMemStats(&m.mem)
	m.cpu = processCPU()
	return m
}

// report reports msgs/s, msgs/rpc, cpu-ns/msg, and the heap allocations
// of the whole process per message, B/msg and allocs/msg.
func (m perMessage) report(b *testing.B, msgs int) {
	cpu := processCPU() - m.cpu
	var mem runtime.MemStats
	runtime.ReadMemStats(&mem)
	n := float64(msgs)
	b.ReportMetric(n/b.Elapsed().Seconds(), "msgs/s")
	b.ReportMetric(n/float64(publishRPCs.Load()), "msgs/rpc")
	b.ReportMetric(float64(cpu)/n, "cpu-ns/msg")
	b.ReportMetric(float64(mem.TotalAlloc-m.mem.TotalAlloc)/n, "B/msg")
	b.ReportMetric(float64(mem.Mallocs-m.mem.Mallocs)/n, "allocs/msg")
}

// BenchmarkPublishPaired measures what BenchmarkPublish and
// BenchmarkPublishBatches do, on a machine whose load changes from second
// to second: each op is a round of each side, in turns (see takeTurns), so
// that every side meets the same load. Run it with a fixed count of ops,
// such as -benchtime=20x.
//
//   - burst: a round is 100,000 messages over 1000 keys with default
//     settings, as BenchmarkPublish.
//   - batches: a round is 10 messages for each of 1000 keys, in batches of
//     exactly 10, as BenchmarkPublishBatches, so that every side sends the
//     same requests and differs only by what it spends per message.
//
// The sides are the official client, the official client carrying a stamp
// made by hand (as a caller without keyorder would), keyorder stamped (the
// default) and keyorder unstamped. keyorder's ratios are taken against the
// official client with a stamp, and unstamped against the official client
// without: cpu-ratio-keyorder-unstamped, less 1, is keyorder's own work as
// a share of the official client's.
func BenchmarkPublishPaired(b *testing.B) {
	batches := pubsub.DefaultPublishSettings
	batches.CountThreshold = 10
	batches.DelayThreshold = time.Hour
	for _, bc := range []struct {
		name     string
		settings pubsub.PublishSettings
		round    int
	}{
		{"burst", pubsub.DefaultPublishSettings, 100_000},
		{"batches", batches, 10_000},
	} {
		b.Run(bc.name, func(b *testing.B) { benchmarkPaired(b, bc.settings, bc.round) })
	}
}

func benchmarkPaired(b *testing.B, settings pubsub.PublishSettings, round int) {
	const keys = 1000
	e := newEnv(b, discardPublishes())
	names := keyNames(keys, "customer-%d")
	headers := map[string]string{"kind": "order-created"}

	official := func() *pubsub.Publisher {
		pub := e.client.Publisher(e.topic)
		pub.EnableMessageOrdering = true
		pub.PublishSettings = settings
		b.Cleanup(pub.Stop)
		return pub
	}
	newPublisher := func(opts ...publisher.Option) *publisher.Publisher {
		p, err := publisher.New(e.client, e.topic, append(opts, publisher.WithPublishSettings(settings))...)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = p.Close(context.Background()) })
		return p
	}
	keyorder := keyorderSide(b, "keyorder", newPublisher(), round, names)
	keyorder.base = "official-stamped"
	takeTurns(b, round, &publishRPCs, []side{
		officialSide(b, "official", official(), round, names, func(int) map[string]string { return headers }),
		officialSide(b, "official-stamped", official(), round, names, stampedBy(keys, headers)),
		keyorder,
		keyorderSide(b, "keyorder-unstamped", newPublisher(publisher.WithoutStamps()), round, names),
	})
}

// BenchmarkPublishUnordered publishes bursts of 10,000 messages without a
// key, default settings: keyorder hands each to the official client and
// watches its result to count it.
func BenchmarkPublishUnordered(b *testing.B) {
	const burst = 10_000
	e := newEnv(b, discardPublishes())
	ctx := context.Background()
	data := make([]byte, 128)
	headers := map[string]string{"kind": "order-created"}

	b.Run("official", func(b *testing.B) {
		pub := e.client.Publisher(e.topic)
		defer pub.Stop()
		bursts(b, burst, func(i int) *pubsub.PublishResult {
			return pub.Publish(ctx, &pubsub.Message{Data: data, Attributes: headers})
		})
	})

	b.Run("keyorder", func(b *testing.B) {
		p, err := publisher.New(e.client, e.topic)
		if err != nil {
			b.Fatal(err)
		}
		defer func() { _ = p.Close(ctx) }()
		bursts(b, burst, func(i int) *publisher.Result { return p.Publish(ctx, &publisher.Message{Data: data, Headers: headers}) })
	})
}

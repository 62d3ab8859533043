package publisher_test

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"cloud.google.com/go/pubsub/v2"

	"github.com/keyorder/keyorder/publisher"
)

// BenchmarkPublishShapes compares keyorder with the official client on
// the shapes of load that decide a publisher's speed, each side in turn
// within each op (see takeTurns), so that every side meets the same load:
//
//   - cpu: 100,000 messages over 1000 keys, on a server that answers at
//     once without storing: the CPU each side spends;
//   - burst: 50 messages on each of 200 keys, round-robin, on the fake
//     with 25 ms on each Publish;
//   - hot: 5,000 messages on one key, with 25 ms;
//   - wide: one message on each of 10,000 keys, with 25 ms.
//
// The sides are the official client at its defaults, the same carrying a
// stamp made by hand, the official client tuned as a careful user would
// (CountThreshold 1,000 and NumGoroutines 1,000), keyorder stamped (the
// default) and keyorder unstamped, all at their defaults otherwise, and
// the ideal side (idealSide): the raw requests, one a key, under
// keyorder's bound on requests in flight. For each keyorder side and the
// ideal side it reports the median over the ops of its speed over each
// official side's in the same op, ratio-<side>/<official side>, and for
// each keyorder side its speed over the ideal side's. Run it with a fixed count of ops, such as -benchtime=7x.
func BenchmarkPublishShapes(b *testing.B) {
	for _, sh := range []struct {
		name         string
		keys, perKey int
		latency      time.Duration
	}{
		{"cpu", 1000, 100, 0},
		{"burst", 200, 50, 25 * time.Millisecond},
		{"hot", 1, 5000, 25 * time.Millisecond},
		{"wide", 10_000, 1, 25 * time.Millisecond},
	} {
		b.Run(sh.name, func(b *testing.B) { benchmarkShape(b, sh.keys, sh.perKey, sh.latency) })
	}
}

func benchmarkShape(b *testing.B, keys, perKey int, latency time.Duration) {
	var rpcs *atomic.Int64
	var client *pubsub.Client
	var topic string
	if latency == 0 {
		e := newEnv(b, discardPublishes())
		client, topic = e.client, e.topic
	} else {
		client, topic, rpcs = latencyServer(b, latency)
	}
	names := keyNames(keys, "customer-%d")
	headers := map[string]string{"kind": "order-created"}
	official := func(settings pubsub.PublishSettings) *pubsub.Publisher {
		pub := client.Publisher(topic)
		pub.EnableMessageOrdering = true
		pub.PublishSettings = settings
		b.Cleanup(pub.Stop)
		return pub
	}
	tuned := pubsub.DefaultPublishSettings
	tuned.CountThreshold = 1000
	tuned.NumGoroutines = 1000
	newPublisher := func(opts ...publisher.Option) *publisher.Publisher {
		p, err := publisher.New(client, topic, opts...)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = p.Close(context.Background()) })
		return p
	}
	n := keys * perKey
	rs := &publishRPCs
	if latency > 0 {
		rs = rpcs
	}
	sides := []side{
		officialSide(b, "official", official(pubsub.DefaultPublishSettings), n, names, func(int) map[string]string { return headers }),
		officialSide(b, "official-stamped", official(pubsub.DefaultPublishSettings), n, names, stampedBy(keys, headers)),
		officialSide(b, "official-tuned", official(tuned), n, names, func(int) map[string]string { return headers }),
		officialSide(b, "official-tuned-stamped", official(tuned), n, names, stampedBy(keys, headers)),
		keyorderSide(b, "keyorder", newPublisher(), n, names),
		keyorderSide(b, "keyorder-unstamped", newPublisher(publisher.WithoutStamps()), n, names),
		idealSide(b, client, topic, n, names),
	}
	ratioAll(b, sides, takeTurns(b, n, rs, sides))
}

// ratioAll reports, for each side whose name starts with "keyorder" or
// is "ideal", the median over the ops of its speed over that of each side
// that does not, in the same op: ratio-<side>/<other>.
func ratioAll(b *testing.B, sides []side, took [][]time.Duration) {
	ours := func(s side) bool { return strings.HasPrefix(s.name, "keyorder") || s.name == "ideal" }
	for i, s := range sides {
		if !ours(s) {
			continue
		}
		for j, o := range sides {
			if ours(o) && !(o.name == "ideal" && s.name != "ideal") {
				continue
			}
			b.ReportMetric(medianRatio(took[j], took[i]), "ratio-"+s.name+"/"+o.name)
		}
	}
}

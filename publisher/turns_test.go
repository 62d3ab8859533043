package publisher_test

import (
	"context"
	"maps"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"cloud.google.com/go/pubsub/v2"

	"github.com/keyorder/keyorder/ordering"
	"github.com/keyorder/keyorder/publisher"
)

// A side is one client a benchmark compares: round publishes one round of
// messages, waits for them, and returns the time its Publish calls took.
// base names the side its ratios are taken against, "" for the first side.
type side struct {
	name  string
	base  string
	round func() time.Duration
}

// officialSide publishes rounds of n messages through pub, message i with
// key names[i%len(names)] and the attributes attrs(i) returns.
func officialSide(b *testing.B, name string, pub *pubsub.Publisher, n int, names []string, attrs func(i int) map[string]string) side {
	ctx := context.Background()
	data := make([]byte, 128)
	results := make([]*pubsub.PublishResult, n)
	return side{name: name, round: func() time.Duration {
		start := time.Now()
		for i := range results {
			results[i] = pub.Publish(ctx, &pubsub.Message{Data: data, Attributes: attrs(i), OrderingKey: names[i%len(names)]})
		}
		publishing := time.Since(start)
		waitAll(b, results)
		return publishing
	}}
}

// stampedBy returns the attributes of message i of an official side that
// carries a stamp made by hand, as a caller without keyorder would, on
// round-robin keys: headers and the key's next number.
func stampedBy(keys int, headers map[string]string) func(i int) map[string]string {
	seqs := make([]uint64, keys)
	return func(i int) map[string]string {
		attrs := make(map[string]string, len(headers)+ordering.StampAttributes)
		maps.Copy(attrs, headers)
		seqs[i%keys]++
		ordering.Stamp{Producer: "hhdykhhlphu4lp74gooygvqsmq", Seq: ordering.MakeSeq(1, uint32(seqs[i%keys]))}.Put(attrs)
		return attrs
	}
}

// keyorderSide publishes rounds of n messages through p, message i with
// key names[i%len(names)] and one header.
func keyorderSide(b *testing.B, name string, p *publisher.Publisher, n int, names []string) side {
	ctx := context.Background()
	data := make([]byte, 128)
	headers := map[string]string{"kind": "order-created"}
	results := make([]*publisher.Result, n)
	return side{name: name, round: func() time.Duration {
		start := time.Now()
		for i := range results {
			results[i] = p.Publish(ctx, &publisher.Message{Data: data, Headers: headers}, publisher.WithOrderingKey(names[i%len(names)]))
		}
		publishing := time.Since(start)
		waitAll(b, results)
		return publishing
	}}
}

// takeTurns runs, for each op of b, one round of each side, in turns that
// rotate from op to op, so that every side meets the machine's load and
// the garbage of the others alike; a round is msgs messages, and rpcs
// counts the Publish requests sent. For each side it reports msgs/s,
// cpu-ns/msg (the whole process's CPU time, server and garbage collector
// included) and msgs/rpc over the run, and, for each side with a base,
// the medians over the ops of its speed over its base's in the same op
// (ratio-) and of its CPU time over its base's (cpu-ratio-); publish-ns/msg
// is the time spent in Publish calls, which sets how many messages of a
// key gather while its previous batch is in flight. Run it with
// a fixed count of ops, such as -benchtime=20x. It returns the time of
// each side's rounds.
func takeTurns(b *testing.B, msgs int, rpcs *atomic.Int64, sides []side) (took [][]time.Duration) {
	took = make([][]time.Duration, len(sides))
	cpu := make([][]time.Duration, len(sides))
	publishing := make([]time.Duration, len(sides))
	sent := make([]int64, len(sides))
	ops := 0
	for b.Loop() {
		for turn := range sides {
			i := (ops + turn) % len(sides)
			rpcs.Store(0)
			start, used := time.Now(), processCPU()
			publishing[i] += sides[i].round()
			took[i] = append(took[i], time.Since(start))
			cpu[i] = append(cpu[i], processCPU()-used)
			sent[i] += rpcs.Load()
		}
		ops++
	}
	n := float64(msgs * ops)
	index := make(map[string]int, len(sides))
	for i, s := range sides {
		index[s.name] = i
		b.ReportMetric(n/sum(took[i]).Seconds(), s.name+"-msgs/s")
		b.ReportMetric(float64(sum(cpu[i]))/n, s.name+"-cpu-ns/msg")
		b.ReportMetric(n/float64(sent[i]), s.name+"-msgs/rpc")
		b.ReportMetric(float64(publishing[i])/n, s.name+"-publish-ns/msg")
	}
	for i, s := range sides {
		if i == 0 {
			continue
		}
		base := 0
		if s.base != "" {
			base = index[s.base]
		}
		b.ReportMetric(medianRatio(took[base], took[i]), "ratio-"+s.name)
		b.ReportMetric(medianRatio(cpu[i], cpu[base]), "cpu-ratio-"+s.name)
	}
	return took
}

func sum(ds []time.Duration) time.Duration {
	var t time.Duration
	for _, d := range ds {
		t += d
	}
	return t
}

// medianRatio returns the median over i of num[i]/den[i].
func medianRatio(num, den []time.Duration) float64 {
	if len(num) == 0 {
		return 0
	}
	rs := make([]float64, len(num))
	for i := range rs {
		rs[i] = float64(num[i]) / float64(den[i])
	}
	slices.Sort(rs)
	return rs[len(rs)/2]
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

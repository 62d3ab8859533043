package outbox_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/keyorder/keyorder/ordering/orderingtest"
	"github.com/keyorder/keyorder/publisher"
	"github.com/keyorder/keyorder/publisher/outbox"
)

// BenchmarkRelayThroughput measures a relay's throughput, in events per
// second from the commit of a backlog to its last event taken by the
// service, beside keyorder's publisher alone publishing the same events
// (same keys, same data) and waiting for their results, on the same fake
// server, in alternating rounds of one run. Each iteration is one round
// of each; the metrics are the medians over the rounds, and the median of
// the rounds' ratios.
func BenchmarkRelayThroughput(b *testing.B) {
	for _, lat := range []time.Duration{0, 5 * time.Millisecond} {
		for _, k := range kinds {
			b.Run(fmt.Sprintf("%s/latency=%v", k.name, lat), func(b *testing.B) { benchRelay(b, k, lat) })
		}
	}
}

const (
	benchEvents = 2000
	benchKeys   = 50
)

func benchRelay(b *testing.B, k dbKind, lat time.Duration) {
	ctx := context.Background()
	db := k.open(b)
	ob, err := outbox.New(ctx, db, k.dialect)
	require.NoError(b, err)
	e := newEnv(b, orderingtest.WithLatency(lat))
	r, err := outbox.NewRelay(ob, e.publisher(b), outbox.WithLogger(quiet), outbox.WithPollInterval(5*time.Millisecond))
	require.NoError(b, err)
	runRelay(b, r)
	alone, err := publisher.New(e.client, e.topic, publisher.WithLogger(quiet))
	require.NoError(b, err)
	b.Cleanup(func() { _ = alone.Close(ctx) })
	msgs := make([]*publisher.Message, benchEvents)
	for i := range msgs {
		msgs[i] = &publisher.Message{Data: fmt.Appendf(nil, "event %d, some bytes of payload to carry", i)}
	}
	key := func(i int) string { return fmt.Sprintf("key-%d", i%benchKeys) }

	relayRound := func() time.Duration {
		target := r.Stats().Published + benchEvents
		tx, err := db.BeginTx(ctx, nil)
		require.NoError(b, err)
		for i, m := range msgs {
			require.NoError(b, ob.Add(ctx, tx, key(i), m))
		}
		require.NoError(b, tx.Commit())
		start := time.Now()
		for r.Stats().Published < target {
			time.Sleep(200 * time.Microsecond) // a measurement's resolution, not a synchronisation
		}
		return time.Since(start)
	}
	aloneRound := func() time.Duration {
		start := time.Now()
		rs := make([]*publisher.Result, len(msgs))
		for i, m := range msgs {
			rs[i] = alone.Publish(ctx, m, publisher.WithOrderingKey(key(i)))
		}
		for _, res := range rs {
			_, err := res.Get(ctx)
			require.NoError(b, err)
		}
		return time.Since(start)
	}
	var relayRate, aloneRate, ratio []float64
	b.ResetTimer()
	for i := range b.N {
		var dr, da time.Duration
		if i%2 == 0 {
			dr, da = relayRound(), aloneRound()
		} else {
			da, dr = aloneRound(), relayRound()
		}
		relayRate = append(relayRate, benchEvents/dr.Seconds())
		aloneRate = append(aloneRate, benchEvents/da.Seconds())
		ratio = append(ratio, da.Seconds()/dr.Seconds())
	}
	b.StopTimer()
	b.ReportMetric(median(relayRate), "relay-ev/s")
	b.ReportMetric(median(aloneRate), "publisher-ev/s")
	b.ReportMetric(median(ratio), "relay/publisher")
	b.ReportMetric(0, "ns/op")
}

func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[len(s)/2]
}

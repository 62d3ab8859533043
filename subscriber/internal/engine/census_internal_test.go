package engine

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"
	"testing"
	"time"

	"cloud.google.com/go/pubsub/v2"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/keyorder/keyorder/ordering"
)

// TestRankingKeepsTheFirst checks ranking against a full sort, on random
// offers with many ties.
func TestRankingKeepsTheFirst(t *testing.T) {
	t.Parallel()
	for _, n := range []int{0, 1, StatsTop - 1, StatsTop, StatsTop + 1, 1000} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			t.Parallel()
			rng := rand.New(rand.NewPCG(uint64(n), 1))
			var all []KeyStats
			rk := ranking[KeyStats]{before: moreBacklog}
			for i := range n {
				k := KeyStats{Key: fmt.Sprintf("k%04d", i), Queued: rng.IntN(5), Running: rng.IntN(2) == 0, Age: time.Duration(rng.IntN(3))}
				all = append(all, k)
				rk.offer(k)
			}
			sort.SliceStable(all, func(i, j int) bool { return moreBacklog(all[i], all[j]) })
			assert.Equal(t, all[:min(n, StatsTop)], slices.Clip(rk.items))
		})
	}
}

// TestOldest checks that a lane's oldest delivery is found wherever the
// lane put it: running, queued, back at the head for a retry, or behind a
// held key's failed message that came back.
func TestOldest(t *testing.T) {
	t.Parallel()
	base := time.Now()
	at := func(s int) *Job { return &Job{received: base.Add(time.Duration(s) * time.Second)} }
	for _, tc := range []struct {
		name    string
		held    bool
		running *Job
		queue   []*Job
		want    time.Time
	}{
		{"empty", false, nil, nil, time.Time{}},
		{"running only", false, at(3), nil, base.Add(3 * time.Second)},
		{"queued in arrival order", false, nil, []*Job{at(1), at(2), at(3)}, base.Add(time.Second)},
		{"running before the queue", false, at(1), []*Job{at(2), at(3)}, base.Add(time.Second)},
		{"a retry back at the head", true, nil, []*Job{at(1), at(4), at(5)}, base.Add(time.Second)},
		{"a failed message back in front of the kept", true, nil, []*Job{at(9), at(2), at(3)}, base.Add(2 * time.Second)},
		{"a failed message back and running", true, at(9), []*Job{at(2), at(3)}, base.Add(2 * time.Second)},
		{"held, with nothing here", true, nil, nil, time.Time{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			l := &Lane{Running: tc.running}
			if tc.held {
				l.trouble = &trouble{held: true}
			}
			for _, j := range tc.queue {
				l.Queue.Push(j)
			}
			assert.Equal(t, tc.want, l.oldest())
		})
	}
}

// liveReceiver returns a receiver, without a server, whose lanes hold keys
// keys, each with perKey deliveries queued and every tenth with a call
// running, the oldest key first.
func liveReceiver(tb testing.TB, keys, perKey int) *Engine {
	tb.Helper()
	cfg := testConfig()
	r, err := New(context.Background(), &cfg, Facts{Name: "projects/p/subscriptions/s", Ordered: true, Counts: &Counters{}}, func(context.Context, *Delivery) error { return nil })
	require.NoError(tb, err)
	tb.Cleanup(func() {
		// The jobs have no messages to settle: stop what runs, only.
		r.Obs.close()
		_ = r.pool.Stop(context.Background())
	})
	start := time.Now().Add(-time.Hour)
	for k := range keys {
		r.Lanes.with(r, fmt.Sprintf("customer-%06d", k), func(l *Lane) {
			for i := range perKey {
				j := &Job{D: Delivery{ID: fmt.Sprint(k*perKey + i)}, received: start.Add(time.Duration(k*perKey+i) * time.Millisecond)}
				if i == 0 && k%10 == 0 {
					l.Running, l.busySince = j, j.received
					continue
				}
				l.Queue.Push(j)
			}
			l.stats.ran(time.Duration(k) * time.Microsecond)
		})
	}
	return r
}

// testConfig is the subscriber's default configuration.
func testConfig() Config {
	return Config{
		Workers: 1000, Partitions: testPartitions, KeyBacklog: 32, MaxAttempts: 5,
		MinBackoff: 100 * time.Millisecond, MaxBackoff: 5 * time.Second, DrainTimeout: 10 * time.Second,
		DedupWindow: testDedupWindow, RedeliveryWait: time.Minute, Receive: pubsub.DefaultReceiveSettings,
		SeqWindow: testSequenceWindow,
	}
}

// The subscriber's defaults (DefaultPartitions, DefaultDedupWindow,
// DefaultSequenceWindow).
const (
	testPartitions     = 1 << 16
	testDedupWindow    = 10_000
	testSequenceWindow = 10_000
)

// stats is what Stats reports of r's lanes.
func stats(r *Engine) Snapshot {
	var sn Snapshot
	r.Survey(&sn, time.Now(), true)
	return sn
}

func TestStatsOfLiveKeys(t *testing.T) {
	t.Parallel()
	r := liveReceiver(t, 1000, 3)
	st := stats(r)
	assert.Equal(t, 1000, st.Keys)
	assert.Equal(t, 100, st.Running)
	assert.Equal(t, 2900, st.Queued)
	require.Len(t, st.TopAge, StatsTop)
	assert.Equal(t, "customer-000000", st.TopAge[0].Key, "the first key's deliveries are the oldest")
	assert.Equal(t, st.OldestAge, st.TopAge[0].Age)
	require.Len(t, st.TopBacklog, StatsTop)
	for _, k := range st.TopBacklog {
		assert.Equal(t, 3, k.Queued+btoi(k.Running))
	}
	require.Len(t, st.Partitions, StatsTop)
	assert.GreaterOrEqual(t, st.Partitions[0].Queued+btoi(st.Partitions[0].Running), st.Partitions[StatsTop-1].Queued+btoi(st.Partitions[StatsTop-1].Running))
	assert.Greater(t, st.ActivePartitions, 900, "1000 keys over 65,536 partitions rarely share one")
	for _, p := range st.Partitions {
		keys, queued := 0, 0
		r.Lanes.each(func(l *Lane) {
			if ordering.Partition(l.Key, testPartitions) == p.Partition {
				keys++
				queued += l.Queue.Len()
			}
		})
		assert.Equal(t, keys, p.Keys, "partition %d", p.Partition)
		assert.Equal(t, queued, p.Queued, "partition %d", p.Partition)
	}

	again := stats(r)
	assert.Equal(t, st.ActivePartitions, again.ActivePartitions, "the scratch is cleared between calls")
	for i := range st.Partitions {
		st.Partitions[i].RunningFor, again.Partitions[i].RunningFor = 0, 0
	}
	assert.Equal(t, st.Partitions, again.Partitions)
}

// BenchmarkStats measures Stats on 100,000 live keys, each with 3
// deliveries here, beside what Stats cost before it ranked anything (the
// counts and held keys: "counts") and beside ranking by a full sort of
// every key ("sort").
func BenchmarkStats(b *testing.B) {
	r := liveReceiver(b, 100_000, 3)
	b.Run("counts", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			r.Lanes.Snapshot()
		}
	})
	b.Run("ranked", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			stats(r)
		}
	})
	b.Run("sort", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			now := time.Now()
			var all []KeyStats
			r.Lanes.each(func(l *Lane) {
				all = append(all, KeyStats{Key: l.Key, Partition: r.pool.Partition(l.Key), Queued: l.Queue.Len(),
					Running: l.Running != nil, Age: now.Sub(l.oldest()), Calls: l.stats.calls, Busy: l.stats.busy})
			})
			sort.Slice(all, func(i, j int) bool { return moreBacklog(all[i], all[j]) })
			_ = slices.Clone(all[:StatsTop])
			sort.Slice(all, func(i, j int) bool { return older(all[i], all[j]) })
			_ = slices.Clone(all[:StatsTop])
		}
	})
}

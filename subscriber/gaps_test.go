package subscriber_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/keyorder/keyorder/internal/metrictest"
	"github.com/keyorder/keyorder/ordering"
	"github.com/keyorder/keyorder/ordering/orderingtest"
	"github.com/keyorder/keyorder/subscriber"
)

// TestMovedKeysAreNoCertainGaps: two Receives on one subscription, as two
// replicas, with keys moving between them as they go idle, every number
// published and processed once. Each replica sees the numbers the other
// processed as gaps; none of them is certain, since a key with nothing in
// a replica may have been on the other, however briefly. A gap counted
// certain where nothing is missing would have an operator look for a loss
// that is not there.
func TestMovedKeysAreNoCertainGaps(t *testing.T) {
	t.Parallel()
	const keys, rounds = 20, 15
	e := newFakeEnv(t, nil)
	other, err := subscriber.Open(testContext(t), e.client, e.sub.Name()[strings.LastIndexByte(e.sub.Name(), '/')+1:])
	require.NoError(t, err)
	var (
		mu   sync.Mutex
		seen = map[string]int{}
	)
	h := func(_ context.Context, d *subscriber.Delivery) error {
		mu.Lock()
		defer mu.Unlock()
		seen[string(d.Data)]++
		return nil
	}
	stopA := start(t, e.sub, h)
	stopB := start(t, other, h)
	total := 0
	for r := 1; r <= rounds; r++ {
		var msgs []stamped
		for k := 0; k < keys; k++ {
			key := fmt.Sprintf("k%d", k)
			msgs = append(msgs, stamped{key, fmt.Sprintf("%s/%d", key, r), ordering.Stamp{Producer: "p", Seq: uint64(r)}})
		}
		for _, err := range publishStamped(t, e.client, e.topic, msgs) {
			require.NoError(t, err)
		}
		total += keys
		// Let the round settle, so that each key goes idle and may move.
		e.waitStats(t, "the round acked", func(s orderingtest.Stats) bool { return s.Acked >= total && s.Outstanding == 0 })
	}
	stopA()
	stopB()
	mu.Lock()
	defer mu.Unlock()
	assert.Len(t, seen, total)
	for data, n := range seen {
		assert.Equal(t, 1, n, data)
	}
	a, b := e.sub.Stats(), other.Stats()
	t.Logf("replica A: %d acked, gaps %d certain, %d uncertain; replica B: %d acked, gaps %d certain, %d uncertain",
		a.Acked, a.Gaps, a.UncertainGaps, b.Acked, b.Gaps, b.UncertainGaps)
	assert.Positive(t, min(a.Acked, b.Acked), "both replicas took keys")
	assert.Zero(t, a.Gaps+b.Gaps, "nothing is missing")
}

// TestGapWarningsAreSpaced: one key with 99 real gaps (every other number
// missing) logs a certain gap at Warn once a minute at most, the rest at
// Debug, and counts every gap.
func TestGapWarningsAreSpaced(t *testing.T) {
	t.Parallel()
	var logs metrictest.Log
	e := newFakeEnv(t, nil, subscriber.WithLogger(logs.Logger()), subscriber.WithKeyBacklog(200))
	var msgs []stamped
	for i := 1; i < 200; i += 2 {
		msgs = append(msgs, stamped{"k", fmt.Sprintf("k/%d", i), ordering.Stamp{Producer: "p", Seq: uint64(i)}})
	}
	for _, err := range publishStamped(t, e.client, e.topic, msgs) {
		require.NoError(t, err)
	}
	stop := start(t, e.sub, func(_ context.Context, d *subscriber.Delivery) error {
		if d.Seq == 1 {
			// Hold k/1 until the next is here, so that the gaps after
			// it are seen while the key stays: certain.
			return poll(testContext(t), func() bool { return e.sub.Stats().Queued > 0 })
		}
		return nil
	})
	e.waitStats(t, "all acked", func(s orderingtest.Stats) bool { return s.Acked == 100 })
	stop()
	st := e.sub.Stats()
	assert.EqualValues(t, 99, st.Gaps+st.UncertainGaps)
	assert.Positive(t, st.Gaps, "some gaps came while the key stayed here")
	recs := records(t, &logs, e.sub.Name())
	warns := count(recs, "WARN", "keyorder/subscriber: sequence gap")
	assert.LessOrEqual(t, warns, 2, "%d warnings for %d certain gaps", warns, st.Gaps)
	assert.Positive(t, warns)
}

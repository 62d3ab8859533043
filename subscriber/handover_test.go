package subscriber_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/keyorder/keyorder/ordering"
	"github.com/keyorder/keyorder/ordering/orderingtest"
	"github.com/keyorder/keyorder/subscriber"
)

// TestRedrivenFirstEventRuns: on a server that redelivers out of order,
// a key's first event fails until the dead-letter policy forwards it,
// events 2 and 3 run, and event 1, redriven from the dead-letter topic
// to the subscription, runs too: nothing is a copy unless a record of
// this process says it ran (S12). Then the redriven event, redriven again,
// is a copy.
func TestRedrivenFirstEventRuns(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	e, deadTopic := newDeadLetterEnv(t, []orderingtest.Option{orderingtest.WithEmulatorRedelivery()},
		subscriber.WithUnorderedRedelivery(), subscriber.WithMaxAttempts(1), fast)
	srv, s := e.srv, e.sub
	e.publish(t, []string{"k"}, 3)

	var fixed atomic.Bool
	rec := &seqRecorder{}
	stop := start(t, s, func(_ context.Context, d *subscriber.Delivery) error {
		if string(d.Data) == "k/1" && !fixed.Load() {
			return errInjected
		}
		rec.add(d)
		return nil
	})
	require.NoError(t, srv.WaitFor(ctx, func() bool {
		_, data := rec.snapshot()
		return len(srv.Messages(deadTopic)) == 1 && countOf(data, "k/3") == 1
	}), "k/1 is dead-lettered, and k/2 and k/3 run: %+v", s.Stats())

	fixed.Store(true)
	dead := srv.Messages(deadTopic)[0]
	redrive := func() {
		publishAttrs(t, e.client, e.topic, dead.OrderingKey, string(dead.Data), dead.Attributes)
	}
	redrive()
	require.NoError(t, srv.WaitFor(ctx, func() bool {
		_, data := rec.snapshot()
		return countOf(data, "k/1") == 1
	}), "the redriven k/1 runs: stats %+v", s.Stats())
	redrive()
	require.NoError(t, srv.WaitFor(ctx, func() bool { return s.Stats().Duplicates == 1 }), "redriven again, a copy: %+v", s.Stats())
	stop()
	seqs, _ := rec.snapshot()
	epoch, _ := ordering.SplitSeq(seqs[0])
	assert.Equal(t, []uint64{ordering.MakeSeq(epoch, 2), ordering.MakeSeq(epoch, 3), ordering.MakeSeq(epoch, 1)}, seqs)
}

// TestRedrivenOlderEpochRuns: a producer's last message of an epoch fails
// until it is dead-lettered; the producer, having counted the key afresh,
// goes on in a new epoch, which runs; the old epoch's message, redriven,
// runs: the end of an old epoch was never seen here, so its numbers past
// the last processed are no copies when redriven.
func TestRedrivenOlderEpochRuns(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	e, deadTopic := newDeadLetterEnv(t, nil, subscriber.WithMaxAttempts(1), fast)
	srv, s := e.srv, e.sub
	st := func(epoch, n uint32) ordering.Stamp {
		return ordering.Stamp{Producer: "p", Seq: ordering.MakeSeq(epoch, n)}
	}
	for _, err := range publishStamped(t, e.client, e.topic, []stamped{{"k", "k/1.1", st(1, 1)}, {"k", "k/1.2", st(1, 2)}, {"k", "k/2.1", st(2, 1)}}) {
		require.NoError(t, err)
	}
	var fixed atomic.Bool
	rec := &seqRecorder{}
	stop := start(t, s, func(_ context.Context, d *subscriber.Delivery) error {
		if string(d.Data) == "k/1.2" && !fixed.Load() {
			return errInjected
		}
		rec.add(d)
		return nil
	})
	require.NoError(t, srv.WaitFor(ctx, func() bool {
		_, data := rec.snapshot()
		return len(srv.Messages(deadTopic)) == 1 && countOf(data, "k/2.1") == 1
	}), "k/1.2 is dead-lettered, and k/2.1 runs: %+v", s.Stats())
	fixed.Store(true)
	dead := srv.Messages(deadTopic)[0]
	publishAttrs(t, e.client, e.topic, dead.OrderingKey, string(dead.Data), dead.Attributes)
	require.NoError(t, srv.WaitFor(ctx, func() bool {
		_, data := rec.snapshot()
		return countOf(data, "k/1.2") == 1
	}), "the redriven k/1.2 runs: stats %+v", s.Stats())
	stop()
	_, data := rec.snapshot()
	assert.Equal(t, []string{"k/1.1", "k/2.1", "k/1.2"}, data)
	assert.Zero(t, s.Stats().Duplicates)
}

// TestSignedHandOverRunsAll: the hand-over of TestEarlierNumbersRunFirst
// with signed stamps and a subscriber that verifies them, beside a forged
// stamp ahead of the producer's numbers: a Receive gets the key's 30 real
// messages and stops before running any; the next, getting them back in
// nack order, runs all 30, stamped, none taken for a copy, and the forgery
// runs as unstamped.
func TestSignedHandOverRunsAll(t *testing.T) {
	t.Parallel()
	const n = 30
	e := newFakeEnv(t, []orderingtest.Option{orderingtest.WithEmulatorRedelivery()},
		subscriber.WithUnorderedRedelivery(), subscriber.WithDrainTimeout(100*time.Millisecond), subscriber.WithStampKey(stampKey),
		handOverLeases())
	publishSigned(t, e.client, e.topic, append(honest("k", 1, n), forgeries("k", nil)[0]))
	handOver(t, e, n+1)
	c := newStampCalls()
	receiveN(t, e.sub, c, n+1, func(*subscriber.Delivery) {})
	got := c.snapshot()
	var want []string
	for i := 1; i <= n; i++ {
		want = append(want, fmt.Sprintf("p/k/%d#%d", i, i))
	}
	assert.ElementsMatch(t, append(want, "/forged high#0"), got)
	st := e.sub.Stats()
	assert.Zero(t, st.Duplicates, "nothing was taken for a copy")
	assert.EqualValues(t, 2, st.Unverified, "the forgery, in each Receive")
}

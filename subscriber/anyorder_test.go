package subscriber_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"cloud.google.com/go/pubsub/v2"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/keyorder/keyorder/ordering"
	"github.com/keyorder/keyorder/ordering/orderingtest"
	"github.com/keyorder/keyorder/subscriber"
)

// seqLog records the numbers a handler was called with, within their
// epochs, in call order.
type seqLog struct {
	mu   sync.Mutex
	seqs []uint64
}

func (l *seqLog) add(d *subscriber.Delivery) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	_, n := ordering.SplitSeq(d.Seq)
	l.seqs = append(l.seqs, uint64(n))
	return len(l.seqs)
}

func (l *seqLog) get() []uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.seqs)
}

// handOverLeases bounds the leases of a hand-over's Receives to 10 s: the
// official client cancels its streams and nacks in a request of its
// own, and when the nack reaches the server before the cancel, the server
// sends the messages again to the stream being cancelled, where they stay
// leased until the stream's ack deadline, up to a minute by default
// (seen: 62 deliveries of 31 messages, 31 nacked, 31 leased, no stream open).
func handOverLeases() subscriber.Option {
	rs := pubsub.DefaultReceiveSettings
	// Both bounds: on exactly once the client's lower bound is otherwise a
	// minute.
	rs.MinDurationPerAckExtension, rs.MaxDurationPerAckExtension = 10*time.Second, 10*time.Second
	return subscriber.WithReceiveSettings(rs)
}

// handOver runs a Receive on e.sub whose handler holds its first call
// until every one of n messages is here, then stops it: S7 nacks them
// all, and the official client sends the nack request's IDs in map order,
// which a server that redelivers as Google's emulator does sends them
// back in.
func handOver(t *testing.T, e fakeEnv, n int) {
	t.Helper()
	stop := start(t, e.sub, func(ctx context.Context, _ *subscriber.Delivery) error {
		<-ctx.Done()
		return ctx.Err()
	})
	require.NoError(t, poll(testContext(t), func() bool { st := e.sub.Stats(); return st.Running == 1 && st.Queued == n-1 }),
		"every message reached the first Receive: %+v", e.sub.Stats())
	stop()
}

// TestEarlierNumbersRunFirst: on a server that redelivers as Google's
// emulator does, a fresh Receive gets a key's messages back in nack
// order. Its first call runs whatever came first; every later one runs in
// the producer's number order, since a stamped delivery is placed before
// the queued ones of its producer with higher numbers. With
// WithUnorderedRedelivery, the numbers below the first one are not taken
// for copies: every message runs, once.
func TestEarlierNumbersRunFirst(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		opts []subscriber.Option
	}{
		{"at least once", nil},
		{"exactly once", []subscriber.Option{subscriber.WithExactlyOnceDelivery()}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newFakeEnv(t, []orderingtest.Option{orderingtest.WithEmulatorRedelivery()},
				append([]subscriber.Option{subscriber.WithUnorderedRedelivery(), subscriber.WithDrainTimeout(100 * time.Millisecond), handOverLeases()}, tc.opts...)...)
			earlierNumbersRunFirst(t, e)
		})
	}
}

// earlierNumbersRunFirst publishes 30 stamped messages of one key to e,
// hands them over from one Receive to the next, and checks that the
// second runs them in number order after its first.
func earlierNumbersRunFirst(t *testing.T, e fakeEnv) {
	const n = 30
	e.publishSeqs(t, "k", 1, n)
	handOver(t, e, n)

	var log seqLog
	all := make(chan struct{})
	release := make(chan struct{})
	stop := start(t, e.sub, func(ctx context.Context, d *subscriber.Delivery) error {
		switch log.add(d) {
		case 1:
			select { // the first call waits for the rest to queue behind it
			case <-release:
			case <-ctx.Done():
				return ctx.Err()
			}
		case n:
			close(all)
		}
		return nil
	})
	require.NoError(t, poll(testContext(t), func() bool { return e.sub.Stats().Queued == n-1 }), "%+v", e.sub.Stats())
	close(release)
	select {
	case <-all:
	case <-time.After(testTimeout):
		t.Fatalf("%d of %d ran: %v; %+v", len(log.get()), n, log.get(), e.sub.Stats())
	}
	stop()
	got := log.get()
	t.Logf("ran %v", got)
	assert.ElementsMatch(t, seqRange(1, n), got, "every message ran once")
	assert.True(t, slices.IsSorted(got[1:]), "after the first, in number order: %v", got)
	st := e.sub.Stats()
	assert.Zero(t, st.Duplicates, "nothing was taken for a copy")
	assert.EqualValues(t, n, st.Acked, "each acked once it ran")
	assert.EqualValues(t, got[0]-1, st.Rerun, "each number below the first ran as one that may have run before")
}

// TestEarlierNumberOvertakesARetry: a stamped delivery that arrives while
// a later number of its producer waits for a retry, here 30 s, runs at
// once, ahead of it, and the waiting one keeps its wait. The stamps are
// set by hand, 5 published before 4, as a server that redelivers out of
// order would deliver them.
func TestEarlierNumberOvertakesARetry(t *testing.T) {
	t.Parallel()
	e := newFakeEnv(t, nil, subscriber.WithUnorderedRedelivery())
	var log seqLog
	ran4 := make(chan struct{})
	waiting := make(chan struct{})
	stop := start(t, e.sub, func(_ context.Context, d *subscriber.Delivery) error {
		log.add(d)
		switch _, n := ordering.SplitSeq(d.Seq); n {
		case 5:
			close(waiting) // once: the log shows a second call of 5
			return subscriber.RetryAfter(30*time.Second, errors.New("not yet"))
		case 4:
			close(ran4)
		}
		return nil
	})
	fiveThenFour(t, e, waiting)
	select {
	case <-ran4:
	case <-time.After(10 * time.Second):
		t.Fatalf("4 waited behind 5's retry: %v; %+v", log.get(), e.sub.Stats())
	}
	// 4 leaves the lane once its call has returned and settled, a moment
	// after it signals.
	require.NoError(t, poll(testContext(t), func() bool {
		held := e.sub.HeldKeys()
		return len(held) == 1 && held[0].Queued == 0
	}), "5 still waits for its retry, and nothing behind it: %+v", e.sub.HeldKeys())
	held := e.sub.HeldKeys()
	require.Len(t, held, 1, "5 still waits for its retry")
	assert.False(t, held[0].RetryAt.IsZero(), "5 keeps its wait")
	stop()
	assert.Equal(t, []uint64{5, 4}, log.get())
}

// fiveThenFour publishes number 5 of key k, stamped by hand, waits for
// running, which the handler closes once it has begun 5, and then
// publishes 4, as a server that redelivers out of order would deliver
// them.
func fiveThenFour(t *testing.T, e fakeEnv, running <-chan struct{}) {
	t.Helper()
	producer := "p-" + t.Name()
	require.Equal(t, []error{nil}, publishStamped(t, e.client, e.topic, []stamped{{"k", "five", ordering.Stamp{Producer: producer, Seq: 5}}}))
	select {
	case <-running:
	case <-time.After(testTimeout):
		t.Fatal("5 never ran")
	}
	require.Equal(t, []error{nil}, publishStamped(t, e.client, e.topic, []stamped{{"k", "four", ordering.Stamp{Producer: producer, Seq: 4}}}))
}

func seqRange(from, to uint64) []uint64 {
	var out []uint64
	for n := from; n <= to; n++ {
		out = append(out, n)
	}
	return out
}

// TestEarlierNumberParksFirst: a key that parks while an earlier number
// of the failed message's producer waits behind it parks them in number
// order, so that a release runs the earlier one first. 5 fails for good
// once 4, published after it, is queued behind it.
func TestEarlierNumberParksFirst(t *testing.T) {
	t.Parallel()
	e := newParkEnv(t, nil, subscriber.WithUnorderedRedelivery())
	running := make(chan struct{})
	stop := start(t, e.sub, func(ctx context.Context, d *subscriber.Delivery) error {
		if _, n := ordering.SplitSeq(d.Seq); n == 5 {
			close(running)
			if err := poll(ctx, func() bool { return e.sub.Stats().Queued == 1 }); err != nil {
				return err
			}
			return subscriber.Permanent(errInjected)
		}
		return nil
	})
	fiveThenFour(t, e.fakeEnv, running)
	e.awaitParked(t, "k", 2)
	stop()
	assert.Equal(t, []string{"four", "five"}, e.parkedData(), "parked in number order")
}

// TestEarlierNumberComesBackFirst: a key held after its message fails for
// good, while an earlier number of the message's producer waits behind
// it, runs the two in number order once both are back, whatever order
// the server sends them back in. 5 fails for good once 4, published after
// it, is queued behind it, and succeeds on its next call.
func TestEarlierNumberComesBackFirst(t *testing.T) {
	t.Parallel()
	e := newFakeEnv(t, []orderingtest.Option{orderingtest.WithEmulatorRedelivery()}, subscriber.WithUnorderedRedelivery(),
		subscriber.WithMaxAttempts(1), subscriber.WithBackoff(time.Millisecond, time.Millisecond))
	var log seqLog
	running := make(chan struct{})
	done := make(chan struct{})
	stop := start(t, e.sub, func(ctx context.Context, d *subscriber.Delivery) error {
		switch log.add(d) {
		case 1:
			close(running)
			if err := poll(ctx, func() bool { return e.sub.Stats().Queued == 1 }); err != nil {
				return err
			}
			return subscriber.Permanent(errInjected)
		case 3:
			close(done)
		}
		return nil
	})
	fiveThenFour(t, e, running)
	select {
	case <-done:
	case <-time.After(testTimeout):
		t.Fatalf("ran %v; %+v", log.get(), e.sub.Stats())
	}
	stop()
	assert.Equal(t, []uint64{5, 4, 5}, log.get())
	assert.EqualValues(t, 1, e.sub.Stats().NackedTail, "4 was sent back with 5")
}

// TestServiceOrderKeepsAnOlderCopyACopy: on the service, which delivers a
// key's messages in order, a lower number that arrives after higher ones
// is a copy stored later (a publish retried, say), and keeps its place:
// a fresh Receive that has 5, 6 and then 4 queued before its first call
// of the key runs 5 and 6 and acks 4 unrun, rather than running 4 first
// and taking it for the start of the sequence. The one worker is busy
// with another key until all three are queued.
func TestServiceOrderKeepsAnOlderCopyACopy(t *testing.T) {
	t.Parallel()
	e := newFakeEnv(t, nil, subscriber.WithWorkers(1))
	producer := "p-" + t.Name()
	var log seqLog
	busy := make(chan struct{})
	stop := start(t, e.sub, func(ctx context.Context, d *subscriber.Delivery) error {
		if d.Key == "other" {
			close(busy)
			return poll(ctx, func() bool { return e.sub.Stats().Queued == 3 })
		}
		log.add(d)
		return nil
	})
	require.Equal(t, []error{nil}, publishStamped(t, e.client, e.topic, []stamped{{"other", "first", ordering.Stamp{Producer: producer, Seq: 1}}}))
	select {
	case <-busy:
	case <-time.After(testTimeout):
		t.Fatal("the other key never ran")
	}
	require.Equal(t, []error{nil, nil, nil}, publishStamped(t, e.client, e.topic, []stamped{
		{"k", "five", ordering.Stamp{Producer: producer, Seq: 5}},
		{"k", "six", ordering.Stamp{Producer: producer, Seq: 6}},
		{"k", "four again", ordering.Stamp{Producer: producer, Seq: 4}},
	}))
	require.NoError(t, poll(testContext(t), func() bool { st := e.sub.Stats(); return st.Acked+st.Deduplicated == 4 }), "%+v", e.sub.Stats())
	stop()
	assert.Equal(t, []uint64{5, 6}, log.get())
	assert.EqualValues(t, 1, e.sub.Stats().Duplicates, "4 is a copy")
}

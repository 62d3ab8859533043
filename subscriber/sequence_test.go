package subscriber_test

import (
	"context"
	"fmt"
	"log/slog"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"cloud.google.com/go/pubsub/v2"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"

	"github.com/keyorder/keyorder/internal/harness"
	"github.com/keyorder/keyorder/internal/metrictest"
	"github.com/keyorder/keyorder/ordering"
	"github.com/keyorder/keyorder/ordering/orderingtest"
	"github.com/keyorder/keyorder/subscriber"
)

// sequence returns perKey messages for each key, interleaved, with data
// "key/i" and stamp i of producer, except for the keys in two, whose odd
// messages producer stamps and even ones producer+"-b", each in its own
// sequence.
func sequence(keys []string, perKey int, producer string, two map[string]bool) []stamped {
	var msgs []stamped
	for i := 1; i <= perKey; i++ {
		for _, k := range keys {
			st := ordering.Stamp{Producer: producer, Seq: uint64(i)}
			if two[k] {
				st = ordering.Stamp{Producer: producer, Seq: uint64(i+1) / 2}
				if i%2 == 0 {
					st.Producer += "-b"
				}
			}
			msgs = append(msgs, stamped{key: k, data: fmt.Sprintf("%s/%d", k, i), stamp: st})
		}
	}
	return msgs
}

// TestDuplicateWithNewMessageID checks that a message the server stored
// twice, under two message IDs, because the official publisher retried a
// request whose response was lost, runs its handler once: S6's ID window
// cannot see the copy, the stamp does.
func TestDuplicateWithNewMessageID(t *testing.T) {
	t.Parallel()
	keys := keyNames(4)
	const perKey = 20
	var (
		mu   sync.Mutex
		gaps []subscriber.Gap
	)
	e := newFakeEnv(t, nil, subscriber.WithGapHandler(func(g subscriber.Gap) {
		mu.Lock()
		defer mu.Unlock()
		gaps = append(gaps, g)
	}))
	lost := []*orderingtest.Fault{
		e.srv.LosePublishResponses(orderingtest.Data("key-1/5"), codes.Unavailable, 1),
		e.srv.LosePublishResponses(orderingtest.Data("key-3/12"), codes.Unavailable, 1),
	}
	for _, err := range publishStamped(t, e.client, e.topic, sequence(keys, perKey, "p-1", map[string]bool{"key-3": true})) {
		require.NoError(t, err, "the official client retries Unavailable")
	}
	for _, f := range lost {
		require.Equal(t, 1, f.Hits())
	}
	stored := len(e.srv.Messages(e.topic))
	copies := stored - len(keys)*perKey
	require.Positive(t, copies, "the retried requests were stored twice")
	ids := map[string]bool{}
	for _, m := range e.srv.Messages(e.topic) {
		ids[m.ID] = true
	}
	require.Len(t, ids, stored, "every copy has a message ID of its own")

	tr := newTracker(keys, perKey)
	tr.receiveUntil(t, e.sub, tr.handler(func(context.Context, *subscriber.Delivery) error { return nil }),
		e.settled(func(st orderingtest.Stats) bool { return st.Acked >= stored }))
	st := e.sub.Stats()
	assert.EqualValues(t, copies, st.Duplicates)
	assert.EqualValues(t, copies, st.Deduplicated, "a duplicate is counted as deduplicated too")
	assert.EqualValues(t, len(keys)*perKey, st.Acked)
	mu.Lock()
	defer mu.Unlock()
	assert.Empty(t, gaps, "interleaved producers of one key keep their own sequences")
}

// TestGapReported checks that a key's failed tail that is never
// republished shows as a gap: the callback names the key, the producer
// and the missing numbers, and the next message is processed as usual.
func TestGapReported(t *testing.T) {
	t.Parallel()
	var (
		mu   sync.Mutex
		gaps []subscriber.Gap
		got  []string
		logs harness.Buffer
	)
	e := newFakeEnv(t, nil, subscriber.WithGapHandler(func(g subscriber.Gap) {
		mu.Lock()
		defer mu.Unlock()
		gaps = append(gaps, g)
	}), subscriber.WithLogger(slog.New(slog.NewTextHandler(&logs, nil))))
	msg := func(i int) stamped {
		return stamped{key: "acct", data: fmt.Sprintf("acct/%d", i), stamp: ordering.Stamp{Producer: "p-1", Seq: uint64(i)}}
	}
	for _, err := range publishStamped(t, e.client, e.topic, []stamped{msg(1), msg(2), msg(3)}) {
		require.NoError(t, err)
	}
	// 4 fails for good, and 5 with it, as its key's tail (P4); neither is
	// republished. 6 and 7 come after the key resumes.
	fail := e.srv.FailPublish(orderingtest.Data("acct/4"), codes.InvalidArgument, 0)
	p := e.client.Publisher(e.topic)
	p.EnableMessageOrdering = true
	ctx := testContext(t)
	for _, i := range []int{4, 5} {
		attrs := map[string]string{}
		msg(i).stamp.Put(attrs)
		_, err := p.Publish(ctx, &pubsub.Message{Data: []byte(msg(i).data), OrderingKey: "acct", Attributes: attrs}).Get(ctx)
		require.Error(t, err, "acct/%d", i)
	}
	p.ResumePublish("acct")
	p.Stop()
	fail.Remove()
	for _, err := range publishStamped(t, e.client, e.topic, []stamped{msg(6), msg(7)}) {
		require.NoError(t, err)
	}

	rctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		done <- e.sub.Receive(rctx, func(_ context.Context, d *subscriber.Delivery) error {
			mu.Lock()
			defer mu.Unlock()
			got = append(got, fmt.Sprintf("%s/%s#%d", d.Producer, d.Data, d.Seq))
			return nil
		})
	}()
	require.NoError(t, e.srv.WaitFor(ctx, func() bool { return e.srv.Stats(e.sub.Name()).Acked == 5 }))
	cancel()
	require.NoError(t, <-done)

	mu.Lock()
	defer mu.Unlock()
	assert.Equal(t, []string{"p-1/acct/1#1", "p-1/acct/2#2", "p-1/acct/3#3", "p-1/acct/6#6", "p-1/acct/7#7"}, got)
	require.Len(t, gaps, 1)
	g := gaps[0]
	// Certain only if acct/6 arrived while acct/3 was still here: a key
	// with nothing here may have been on another client (S12).
	assert.Equal(t, subscriber.Gap{Key: "acct", Producer: "p-1", From: 4, To: 5, MessageID: g.MessageID, Seq: 6, Uncertain: g.Uncertain}, g)
	assert.NotEmpty(t, g.MessageID)
	assert.EqualValues(t, 1, e.sub.Stats().Gaps+e.sub.Stats().UncertainGaps)
	assert.Equal(t, 1, strings.Count(logs.String(), "sequence gap"), "the gap is logged once: %s", logs.String())
	assert.Contains(t, logs.String(), "first_missing=0.4 last_missing=0.5")
}

// TestSequenceWindowOff checks that WithSequenceWindow(0) turns the checks
// off: a copy under a new ID runs again, and no gap is reported.
func TestSequenceWindowOff(t *testing.T) {
	t.Parallel()
	var gaps sync.Map
	e := newFakeEnv(t, nil, subscriber.WithSequenceWindow(0),
		subscriber.WithGapHandler(func(g subscriber.Gap) { gaps.Store(g.Key, g) }))
	lost := e.srv.LosePublishResponses(orderingtest.Data("k/1"), codes.Unavailable, 1)
	msgs := []stamped{
		{key: "k", data: "k/1", stamp: ordering.Stamp{Producer: "p", Seq: 1}},
		{key: "k", data: "k/3", stamp: ordering.Stamp{Producer: "p", Seq: 3}},
	}
	for _, err := range publishStamped(t, e.client, e.topic, msgs) {
		require.NoError(t, err)
	}
	require.Equal(t, 1, lost.Hits())
	stored := len(e.srv.Messages(e.topic))
	var calls sync.Map
	ctx, cancel := context.WithCancel(testContext(t))
	done := make(chan error, 1)
	go func() {
		done <- e.sub.Receive(ctx, func(_ context.Context, d *subscriber.Delivery) error {
			calls.Store(d.ID, true)
			return nil
		})
	}()
	require.NoError(t, e.srv.WaitFor(ctx, func() bool { return e.srv.Stats(e.sub.Name()).Acked == stored }))
	cancel()
	require.NoError(t, <-done)
	n := 0
	calls.Range(func(any, any) bool { n++; return true })
	assert.Equal(t, stored, n, "every copy ran")
	gaps.Range(func(k, v any) bool { t.Errorf("gap reported with the checks off: %+v", v); return true })
	assert.Zero(t, e.sub.Stats().Duplicates)
}

func TestSequenceWindowInvalid(t *testing.T) {
	t.Parallel()
	_, client := harness.Pstest(t)
	topic, sub := names()
	_, err := subscriber.CreateWithTopic(testContext(t), client, topic, sub, subscriber.WithSequenceWindow(-1))
	require.ErrorIs(t, err, subscriber.ErrInvalidConfig)
}

// TestReleaseChecksSequences: k/2 parks its key; behind it are parked
// k/3, a copy of k/2 that the service stored twice, and k/5, after a
// number that was never stored. Release runs the parked messages through
// the same rules as Receive (S12): the copy is skipped, and the gap before
// k/5 is reported.
func TestReleaseChecksSequences(t *testing.T) {
	t.Parallel()
	gaps := make(chan subscriber.Gap, 10)
	e := newParkEnv(t, nil, subscriber.WithGapHandler(func(g subscriber.Gap) { gaps <- g }))
	st := func(n uint64) ordering.Stamp { return ordering.Stamp{Producer: "p", Seq: n} }
	for _, err := range publishStamped(t, e.client, e.topic, []stamped{
		{"k", "k/1", st(1)}, {"k", "k/2", st(2)}, {"k", "k/3", st(3)}, {"k", "k/2", st(2)}, {"k", "k/5", st(5)},
	}) {
		require.NoError(t, err)
	}
	var broken atomic.Bool
	broken.Store(true)
	rec := &seqRecorder{}
	stop := start(t, e.sub, func(_ context.Context, d *subscriber.Delivery) error {
		if d.Seq == 2 && broken.Load() {
			return subscriber.Permanent(errInjected)
		}
		rec.add(d)
		return nil
	})
	e.awaitParked(t, "k", 4)
	broken.Store(false)
	require.NoError(t, e.sub.Release(testContext(t), "k"))
	stop()
	seqs, _ := rec.snapshot()
	assert.Equal(t, []uint64{1, 2, 3, 5}, seqs, "the copy of 2 runs no second time")
	assert.Equal(t, int64(1), e.sub.Stats().Duplicates)
	require.Len(t, gaps, 1)
	g := <-gaps
	assert.Equal(t, uint64(4), g.From)
	assert.Equal(t, uint64(4), g.To)
	assert.Equal(t, uint64(5), g.Seq)
}

// TestExactlyOnceUndoneAckWithStamps: on an exactly-once subscription the
// ack of k/1 fails while k/2 runs. k/1 was not processed as far as the
// service knows, so when it comes back it runs again, stamp or not: a
// number whose ack was undone is owed, not a copy (S12).
func TestExactlyOnceUndoneAckWithStamps(t *testing.T) {
	t.Parallel()
	srv, client := harness.Fake(t, orderingtest.WithAckDeadline(300*time.Millisecond))
	topic, subID := names()
	s, err := subscriber.CreateWithTopic(testContext(t), client, topic, subID, subscriber.WithExactlyOnceDelivery())
	require.NoError(t, err)
	e := fakeEnv{srv: srv, client: client, topic: s.Topic(), sub: s}
	e.publish(t, []string{"k"}, 2) // stamped by keyorder's publisher
	refused := srv.FailAcks(orderingtest.Data("k/1"), orderingtest.PermanentAckFailure, 1)

	rec := &seqRecorder{}
	ranTwice := make(chan struct{})
	var once sync.Once
	stop := start(t, s, func(ctx context.Context, d *subscriber.Delivery) error {
		rec.add(d)
		_, data := rec.snapshot()
		switch {
		case string(d.Data) == "k/2" && countOf(data, "k/2") == 1:
			// k/1's ack is refused while this runs.
			if err := poll(ctx, func() bool { return s.Stats().AckFailed > 0 }); err != nil {
				return err
			}
		case countOf(data, "k/1") == 2:
			once.Do(func() { close(ranTwice) })
		}
		return nil
	})
	select {
	case <-ranTwice:
	case <-time.After(testTimeout):
		_, data := rec.snapshot()
		t.Fatalf("k/1 did not run again after its ack was refused: calls %v, stats %+v", data, s.Stats())
	}
	stop()
	assert.Equal(t, 1, refused.Hits())
	assert.Zero(t, s.Stats().Duplicates, "k/1 was not taken for a copy")
}

// TestRedrivenDeadLetterRuns: k/2 fails until it is dead-lettered, and
// k/3 runs after it, with k/2's number reported as a gap. Once the fix
// ships, an operator republishes k/2 from the dead-letter topic with its
// attributes, stamp included. A number reported missing is not a copy
// when it arrives: k/2 runs (S12).
func TestRedrivenDeadLetterRuns(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	gaps := make(chan subscriber.Gap, 10)
	e, deadTopic := newDeadLetterEnv(t, nil, subscriber.WithMaxAttempts(1), fast,
		subscriber.WithGapHandler(func(g subscriber.Gap) { gaps <- g }))
	srv, client, s := e.srv, e.client, e.sub
	e.publish(t, []string{"k"}, 3)

	var fixed atomic.Bool
	rec := &seqRecorder{}
	stop := start(t, s, func(_ context.Context, d *subscriber.Delivery) error {
		if string(d.Data) == "k/2" && !fixed.Load() {
			return errInjected
		}
		rec.add(d)
		return nil
	})
	require.NoError(t, srv.WaitFor(ctx, func() bool {
		_, data := rec.snapshot()
		return len(srv.Messages(deadTopic)) == 1 && countOf(data, "k/3") == 1
	}), "k/2 is dead-lettered and k/3 runs")
	require.Len(t, gaps, 1, "k/2's number is reported missing")

	fixed.Store(true)
	dead := srv.Messages(deadTopic)[0]
	p := client.Publisher(e.topic)
	p.EnableMessageOrdering = true
	defer p.Stop()
	_, err := p.Publish(ctx, &pubsub.Message{Data: dead.Data, Attributes: dead.Attributes, OrderingKey: dead.OrderingKey}).Get(ctx)
	require.NoError(t, err)
	require.NoError(t, srv.WaitFor(ctx, func() bool {
		_, data := rec.snapshot()
		return countOf(data, "k/2") == 1
	}), "the redriven k/2 runs: stats %+v", s.Stats())
	stop()
	seqs, _ := rec.snapshot()
	epoch, _ := ordering.SplitSeq(seqs[0])
	assert.Equal(t, []uint64{ordering.MakeSeq(epoch, 1), ordering.MakeSeq(epoch, 3), ordering.MakeSeq(epoch, 2)}, seqs)
	assert.Zero(t, s.Stats().Duplicates)
}

// TestGapHandlerExits: a gap handler that exits its goroutine, as
// t.FailNow does, changes nothing of the message after the gap: the gap is
// reported once the message has run and been settled, so it runs once,
// is acked, and costs no attempt (S11, S5). With WithMaxAttempts(1) a gap
// handler judged before the call would fail the message for good unrun.
func TestGapHandlerExits(t *testing.T) {
	t.Parallel()
	var exited atomic.Bool
	e := newFakeEnv(t, nil, fast, subscriber.WithMaxAttempts(1), subscriber.WithGapHandler(func(subscriber.Gap) {
		if exited.CompareAndSwap(false, true) {
			runtime.Goexit()
		}
	}))
	st := func(n uint64) ordering.Stamp { return ordering.Stamp{Producer: "p", Seq: n} }
	for _, err := range publishStamped(t, e.client, e.topic, []stamped{{"k", "k/1", st(1)}, {"k", "k/3", st(3)}}) {
		require.NoError(t, err)
	}
	rec := &seqRecorder{}
	got := make(chan struct{})
	stop := start(t, e.sub, func(_ context.Context, d *subscriber.Delivery) error {
		rec.add(d)
		if d.Seq == 3 {
			close(got)
		}
		return nil
	})
	select {
	case <-got:
	case <-time.After(testTimeout):
		t.Fatalf("k/3 did not run: %+v", e.sub.Stats())
	}
	stop()
	seqs, _ := rec.snapshot()
	assert.Equal(t, []uint64{1, 3}, seqs)
	assert.True(t, exited.Load())
	stats := e.sub.Stats()
	assert.Zero(t, stats.Retried, "the exit cost k/3 no attempt")
	assert.Zero(t, stats.Failed, "nor failed it")
	assert.EqualValues(t, 2, stats.Acked)
	assert.EqualValues(t, 1, stats.Gaps+stats.UncertainGaps)
}

// TestUncertainGaps: a gap before a message that arrived while its key had
// nothing here, after a pause, may be the numbers another client of the
// subscription processed, as when a key moves from one process to another
// and back: it is uncertain, logged at Info and counted apart. A gap
// before a message that arrived while an earlier one of its key was still
// here is certain: the key cannot have moved. Not parallel: it shortens
// the pause.
func TestUncertainGaps(t *testing.T) {
	defer subscriber.SetGapQuiet(0)()
	var logs metrictest.Log
	gaps := make(chan subscriber.Gap, 4)
	e := newFakeEnv(t, nil, subscriber.WithLogger(logs.Logger()), subscriber.WithGapHandler(func(g subscriber.Gap) { gaps <- g }))
	st := func(n uint64) ordering.Stamp { return ordering.Stamp{Producer: "p", Seq: n} }
	first, proceed := make(chan struct{}), make(chan struct{})
	stop := start(t, e.sub, func(_ context.Context, d *subscriber.Delivery) error {
		if d.Seq == 5 {
			close(first)
			<-proceed // k/7 arrives while k/5 runs
		}
		return nil
	})
	for _, err := range publishStamped(t, e.client, e.topic, []stamped{{"k", "k/1", st(1)}}) {
		require.NoError(t, err)
	}
	require.NoError(t, e.srv.WaitFor(testContext(t), func() bool { return e.srv.Stats(e.sub.Name()).Acked == 1 }))
	for _, err := range publishStamped(t, e.client, e.topic, []stamped{{"k", "k/3", st(3)}}) {
		require.NoError(t, err)
	}
	g := <-gaps
	assert.True(t, g.Uncertain, "2 went missing while k had nothing here: %+v", g)
	assert.Equal(t, [2]uint64{2, 2}, [2]uint64{g.From, g.To})

	for _, err := range publishStamped(t, e.client, e.topic, []stamped{{"k", "k/5", st(5)}, {"k", "k/7", st(7)}}) {
		require.NoError(t, err)
	}
	<-first
	require.NoError(t, e.srv.WaitFor(testContext(t), func() bool { return e.sub.Stats().Queued == 1 }), "k/7 is here, behind k/5")
	close(proceed)
	for i := 0; i < 2; i++ {
		g = <-gaps
		if g.From == 6 {
			break
		}
	}
	assert.False(t, g.Uncertain, "6 went missing while k/5 was here: %+v", g)
	stop()
	stats := e.sub.Stats()
	assert.EqualValues(t, 2, stats.UncertainGaps, "2, and 4, before k/5, which came to a key with nothing here")
	assert.EqualValues(t, 1, stats.Gaps, "6")
	recs := records(t, &logs, e.sub.Name())
	assert.Equal(t, 2, count(recs, "INFO", "keyorder/subscriber: sequence gap"), "%v", recs)
	assert.Equal(t, 1, count(recs, "WARN", "keyorder/subscriber: sequence gap"), "%v", recs)
}

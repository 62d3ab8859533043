package subscriber_test

// Tests of where features meet: each combines two features, or a feature
// and what an operator does by hand, and checks the contract of both.

import (
	"context"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"cloud.google.com/go/pubsub/v2"
	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/api/iterator"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/keyorder/keyorder/internal/harness"
	"github.com/keyorder/keyorder/ordering"
	"github.com/keyorder/keyorder/ordering/orderingtest"
	"github.com/keyorder/keyorder/subscriber"
)

// seqRecorder records the stamps a handler processed, in order.
type seqRecorder struct {
	mu   sync.Mutex
	seqs []uint64
	data []string
}

func (r *seqRecorder) add(d *subscriber.Delivery) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.seqs = append(r.seqs, d.Seq)
	r.data = append(r.data, string(d.Data))
}

func (r *seqRecorder) snapshot() ([]uint64, []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]uint64(nil), r.seqs...), append([]string(nil), r.data...)
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

// TestReleaseStopsAtShutdown: once Receive has begun shutting down, a
// running Release starts no handler call (S7), whatever it has left to
// run; the key stays parked with the rest. The shutdown is seen begun when
// y/2, queued behind a running y/1, is nacked for it.
func TestReleaseStopsAtShutdown(t *testing.T) {
	t.Parallel()
	e := newParkEnv(t, nil, subscriber.WithMaxAttempts(1))
	e.publishSeqs(t, "k", 1, 10)
	var broken, stopping atomic.Bool
	broken.Store(true)
	var after atomic.Int32
	yRunning, yRelease := make(chan struct{}), make(chan struct{})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		done <- e.sub.Receive(ctx, func(hctx context.Context, d *subscriber.Delivery) error {
			switch {
			case d.Key == "y":
				if string(d.Data) == "y/1" {
					close(yRunning)
					<-yRelease
				}
				return nil
			case stopping.Load():
				after.Add(1)
				return nil
			case broken.Load():
				return errInjected
			}
			// The first released message: Receive stops while it runs.
			stopping.Store(true)
			cancel()
			err := poll(hctx, func() bool { return e.sub.Stats().NackedShutdown > 0 })
			close(yRelease)
			return err
		})
	}()
	e.awaitParked(t, "k", 10)
	e.publishSeqs(t, "y", 1, 2)
	<-yRunning
	require.NoError(t, poll(testContext(t), func() bool { return e.sub.Stats().Queued == 1 }), "y/2 waits behind y/1")
	broken.Store(false)
	require.Error(t, e.sub.Release(testContext(t), "k"))
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(testTimeout):
		t.Fatal("Receive did not return")
	}
	assert.Zero(t, after.Load(), "handler calls started after Receive began shutting down")
}

// topicIDs lists the IDs of the topics of client's project.
func topicIDs(t *testing.T, client *pubsub.Client) []string {
	t.Helper()
	var ids []string
	it := client.TopicAdminClient.ListTopics(testContext(t), &pubsubpb.ListTopicsRequest{Project: "projects/" + client.Project()})
	for {
		tp, err := it.Next()
		if err == iterator.Done {
			return ids
		}
		require.NoError(t, err)
		ids = append(ids, tp.Name[strings.LastIndexByte(tp.Name, '/')+1:])
	}
}

// TestReplayDoesNotPark: Replay takes Receive's options, but its failure
// policy is its own: the first failure stops it. WithParking does not
// apply: no control topic is made, and nothing is copied to the parking
// topic.
func TestReplayDoesNotPark(t *testing.T) {
	t.Parallel()
	e := newReplayEnv(t, time.Hour)
	e.publish(t, keyNames(2), 1, 3, "")
	before := topicIDs(t, e.client)
	err := await(t, e.replay(testContext(t), time.Time{}, func(_ context.Context, d *subscriber.Delivery) error {
		if string(d.Data) == "key-1/2" {
			return subscriber.Permanent(errInjected)
		}
		return nil
	}, subscriber.WithParking("parked"), subscriber.WithMaxAttempts(1), fast))
	var re *subscriber.ReplayError
	require.ErrorAs(t, err, &re)
	assert.Equal(t, "key-1", re.Key)
	assert.Equal(t, before, topicIDs(t, e.client), "Replay made no topic")
	e.requireNoSubscription(t)
}

// TestShutdownLeavesNoLease: Receive stops while k/1 runs and k/2..k/5
// wait behind it. Once Receive returns, nothing of the key is outstanding
// (S11: shutdown never waits out a lease), so the next Receive gets the
// rest at once, not after the ack deadline.
//
// The server takes a few milliseconds to send a nacked message again, as
// the service does. With none at all, it could answer the official
// client's last nack on the stream the client cancelled a moment before,
// since the client sends the two without order between them (shutdown.go).
func TestShutdownLeavesNoLease(t *testing.T) {
	t.Parallel()
	const lease = 5 * time.Second
	e := newFakeEnv(t, []orderingtest.Option{orderingtest.WithAckDeadline(lease), orderingtest.WithLatency(20 * time.Millisecond)},
		subscriber.WithDrainTimeout(time.Second))
	e.publish(t, []string{"k"}, 5)
	sub := e.sub.Name()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		done <- e.sub.Receive(ctx, func(hctx context.Context, d *subscriber.Delivery) error {
			if string(d.Data) != "k/1" {
				return nil
			}
			// Everything of the key is here before Receive stops; k/1
			// ends once the shutdown has begun, at the drain timeout,
			// which cancels hctx, and succeeds.
			if err := e.srv.WaitFor(hctx, func() bool { return e.srv.Stats(sub).Delivered >= 5 }); err != nil {
				return err
			}
			cancel()
			<-hctx.Done()
			return nil
		})
	}()
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(testTimeout):
		t.Fatal("Receive did not return")
	}
	returned := time.Now()
	// The last nack's answer, if any, comes after the server's latency.
	wctx, wcancel := context.WithTimeout(context.Background(), time.Second)
	defer wcancel()
	assert.NoError(t, e.srv.WaitFor(wctx, func() bool { return e.srv.Stats(sub).Outstanding == 0 }))
	st := e.srv.Stats(sub)
	assert.Zero(t, st.Outstanding, "outstanding after Receive returned: %+v", st)
	assert.Equal(t, 1, st.Acked)
	assert.NotZero(t, st.Nacked, "the rest was nacked")

	rec := &seqRecorder{}
	got := make(chan struct{})
	stop := start(t, e.sub, func(_ context.Context, d *subscriber.Delivery) error {
		rec.add(d)
		if string(d.Data) == "k/5" {
			close(got)
		}
		return nil
	})
	select {
	case <-got:
	case <-time.After(lease / 2):
		_, data := rec.snapshot()
		t.Fatalf("in %v the next Receive got %v of the key's 4 messages left", lease/2, data)
	}
	stop()
	_, data := rec.snapshot()
	assert.Equal(t, []string{"k/2", "k/3", "k/4", "k/5"}, data)
	t.Logf("the rest arrived %v after Receive returned", time.Since(returned))
}

// TestNoParkingOrDeadLetteringOntoItsOwnTopic: a subscription that parks
// or dead-letters onto its own topic would receive its failures again as
// new messages, without end. Both are refused with ErrInvalidConfig, by ID
// or full name, before anything is created.
func TestNoParkingOrDeadLetteringOntoItsOwnTopic(t *testing.T) {
	t.Parallel()
	srv, client := harness.Fake(t)
	ctx := testContext(t)
	for _, tc := range []struct {
		name string
		opt  func(topic string) subscriber.Option
	}{
		{"parking", func(topic string) subscriber.Option { return subscriber.WithParking(topic) }},
		{"parking by full name", func(topic string) subscriber.Option { return subscriber.WithParking(path(client, "topics", topic)) }},
		{"dead-lettering", func(topic string) subscriber.Option { return subscriber.WithDeadLetterPolicy(topic, 5) }},
		{"dead-lettering by full name", func(topic string) subscriber.Option {
			return subscriber.WithDeadLetterPolicy(path(client, "topics", topic), 5)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			topic, subID := names()
			_, err := subscriber.CreateWithTopic(ctx, client, topic, subID, tc.opt(topic))
			require.ErrorIs(t, err, subscriber.ErrInvalidConfig)
			_, err = client.TopicAdminClient.GetTopic(ctx, &pubsubpb.GetTopicRequest{Topic: path(client, "topics", topic)})
			assert.Equal(t, codes.NotFound, status.Code(err), "the topic was not created")
			assert.Empty(t, srv.Subscriptions())
		})
	}
	t.Run("Open with parking", func(t *testing.T) {
		topic, subID := names()
		// The topic retains messages, as a parking topic must.
		_, err := client.TopicAdminClient.CreateTopic(ctx, &pubsubpb.Topic{
			Name: path(client, "topics", topic), MessageRetentionDuration: durationpb.New(time.Hour)})
		require.NoError(t, err)
		s, err := subscriber.CreateWithTopic(ctx, client, topic, subID)
		require.NoError(t, err)
		topicsBefore := topicIDs(t, client)
		_, err = subscriber.Open(ctx, client, subID, subscriber.WithParking(topic))
		require.ErrorIs(t, err, subscriber.ErrInvalidConfig)
		assert.Equal(t, topicsBefore, topicIDs(t, client), "no control topic was created")
		_, err = subscriber.Open(ctx, client, s.Name(), subscriber.WithParking(s.Topic()))
		require.ErrorIs(t, err, subscriber.ErrInvalidConfig)
	})
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
	assert.EqualValues(t, 1, stats.Gaps)
}

package subscriber_test

import (
	"context"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/keyorder/keyorder/internal/harness"
	"github.com/keyorder/keyorder/internal/metrictest"
	"github.com/keyorder/keyorder/ordering"
	"github.com/keyorder/keyorder/ordering/orderingtest"
	"github.com/keyorder/keyorder/subscriber"
)

// The doors of the one call path, where features meet: each test here is a
// combination that broke the contract while a door applied part of a
// verdict by itself.

// TestExactlyOnceCopyAckFails: on an exactly-once subscription, a stamped
// copy of a processed message (a publish stored twice) is skipped unrun,
// and its ack is refused. A refused ack of a message that never ran here
// makes nothing owed: when the service delivers the copy again, it is
// skipped again, and the handler never sees it.
func TestExactlyOnceCopyAckFails(t *testing.T) {
	t.Parallel()
	srv, client := harness.Fake(t, orderingtest.WithAckDeadline(300*time.Millisecond))
	topic, subID := names()
	s, err := subscriber.CreateWithTopic(testContext(t), client, topic, subID, subscriber.WithExactlyOnceDelivery())
	require.NoError(t, err)
	st := func(n uint64) ordering.Stamp { return ordering.Stamp{Producer: "p", Seq: n} }
	refused := srv.FailAcks(orderingtest.Data("k/1-copy"), orderingtest.PermanentAckFailure, 1)
	for _, err := range publishStamped(t, client, s.Topic(), []stamped{{"k", "k/1", st(1)}, {"k", "k/1-copy", st(1)}, {"k", "k/2", st(2)}}) {
		require.NoError(t, err)
	}
	var mu sync.Mutex
	var calls []string
	stop := start(t, s, func(_ context.Context, d *subscriber.Delivery) error {
		mu.Lock()
		defer mu.Unlock()
		calls = append(calls, string(d.Data))
		return nil
	})
	copyID := ""
	for _, m := range srv.Messages(s.Topic()) {
		if string(m.Data) == "k/1-copy" {
			copyID = m.ID
		}
	}
	require.NotEmpty(t, copyID)
	require.NoError(t, srv.WaitFor(testContext(t), func() bool {
		copies := 0
		for _, d := range srv.Deliveries(s.Name()) {
			if d.MessageID == copyID {
				copies++
			}
		}
		return refused.Hits() == 1 && copies >= 2 && srv.Stats(s.Name()).Outstanding == 0
	}), "the copy comes back after its refused ack and is settled")
	stop()
	mu.Lock()
	defer mu.Unlock()
	assert.Equal(t, []string{"k/1", "k/2"}, calls, "the copy never runs")
	assert.GreaterOrEqual(t, s.Stats().Duplicates, int64(2), "skipped both times")
}

// TestPushShowsFailures: what pull shows of a failing key, push shows:
// while a push call runs, Stats counts it running, its key and its age; a
// message that fails for good holds its key in HeldKeys and Stats.Held,
// with a KeyHeld event and the key held log, and its failure is logged
// with the handler's error; its success ends the hold with KeyReleased.
func TestPushShowsFailures(t *testing.T) {
	t.Parallel()
	var logs metrictest.Log
	events := make(chan subscriber.KeyEvent, 16)
	running, proceed := make(chan struct{}), make(chan struct{})
	var fixed atomic.Bool
	var calls atomic.Int32
	e := newPushEnv(t, func(_ context.Context, d *subscriber.Delivery) error {
		if calls.Add(1) == 1 {
			close(running)
			<-proceed
		}
		if !fixed.Load() {
			return subscriber.Permanent(errInjected)
		}
		return nil
	}, subscriber.WithLogger(logs.Logger()), subscriber.WithRedeliveryWait(time.Minute),
		subscriber.WithKeyEvents(func(ev subscriber.KeyEvent) { events <- ev }))
	e.publish(t, []string{"k"}, 1)
	select {
	case <-running:
	case <-time.After(testTimeout):
		t.Fatal("the push did not reach the handler")
	}
	st := e.sub.Stats()
	assert.Equal(t, 1, st.Running, "a push call runs")
	assert.Equal(t, 1, st.Keys)
	assert.Positive(t, st.OldestAge)
	close(proceed)

	ev := awaitEvent(t, events, subscriber.KeyHeld)
	assert.Equal(t, "k", ev.Key)
	assert.ErrorIs(t, ev.Err, errInjected)
	held := e.sub.HeldKeys()
	require.Len(t, held, 1)
	assert.Equal(t, "k", held[0].Key)
	assert.True(t, held[0].Held)
	assert.ErrorIs(t, held[0].Err, errInjected)
	assert.Len(t, e.sub.Stats().Held, 1)
	recs := records(t, &logs, e.sub.Name())
	assert.Equal(t, 1, count(recs, "WARN", "keyorder/subscriber: key held"), "%v", recs)
	failed := 0
	for _, r := range recs {
		if r["msg"] == "keyorder/subscriber: message failed for good" {
			failed++
			assert.Contains(t, r["error"], errInjected.Error(), "the failure is logged with its error")
		}
	}
	assert.Positive(t, failed)

	fixed.Store(true)
	ev = awaitEvent(t, events, subscriber.KeyReleased)
	assert.Equal(t, subscriber.ReasonSucceeded, ev.Reason)
	assert.Empty(t, e.sub.HeldKeys())
	assert.EqualValues(t, 1, e.sub.Stats().Failed)
}

// TestPushParkingWinsOverDeadLettering: on a push subscription with
// parking and a dead-letter policy, a message that keeps failing is parked
// on the delivery the policy would dead-letter, rather than answered 500:
// nothing reaches the dead-letter topic, and the key's later message waits
// in the parking topic, as on pull.
func TestPushParkingWinsOverDeadLettering(t *testing.T) {
	t.Parallel()
	topic, _ := names()
	dlq, park := "dead-"+topic, "parked-"+topic
	var mu sync.Mutex
	var seen []string
	e := newPushEnv(t, func(_ context.Context, d *subscriber.Delivery) error {
		mu.Lock()
		defer mu.Unlock()
		seen = append(seen, string(d.Data))
		if string(d.Data) == "k/1" {
			return errInjected
		}
		return nil
	}, subscriber.WithDeadLetterPolicy(dlq, 5), subscriber.WithMaxAttempts(100),
		subscriber.WithParking(park), subscriber.WithParkingWait(100*time.Millisecond))
	pe := parkEnv{fakeEnv: e.fakeEnv, parkTopic: path(e.client, "topics", park)}
	e.publish(t, []string{"k"}, 2)
	pk := pe.awaitParked(t, "k", 2)
	assert.Equal(t, "k/1", pe.parkedData()[0])
	assert.Empty(t, e.srv.Messages(path(e.client, "topics", dlq)), "nothing dead-lettered")
	mu.Lock()
	defer mu.Unlock()
	assert.Equal(t, 5, countOf(seen, "k/1"), "called on each of its 5 deliveries")
	assert.Zero(t, countOf(seen, "k/2"), "k/2 waits for the release")
	assert.Equal(t, pk.MessageID, e.srv.Messages(e.topic)[0].ID)
	assert.Zero(t, e.sub.Stats().DeadLettered)
}

// TestUnwrappedPushRedriven: on an unwrapped push subscription with
// write_metadata, attributes arrive as headers, lower-cased. A stamped
// message redriven from a dead-letter topic is still known as redriven:
// its number, below what the endpoint has seen of its key, runs rather
// than being taken for a copy and answered 204 unrun.
func TestUnwrappedPushRedriven(t *testing.T) {
	t.Parallel()
	srv, client, web, mux, validator := pushServers(t)
	topic, subID := names()
	createDirectly(t, client, &pubsubpb.Subscription{
		Name: path(client, "subscriptions", subID), Topic: path(client, "topics", topic), EnableMessageOrdering: true,
		PushConfig: &pubsubpb.PushConfig{
			PushEndpoint:         web.URL + "/push",
			Wrapper:              &pubsubpb.PushConfig_NoWrapper_{NoWrapper: &pubsubpb.PushConfig_NoWrapper{WriteMetadata: true}},
			AuthenticationMethod: &pubsubpb.PushConfig_OidcToken_{OidcToken: &pubsubpb.PushConfig_OidcToken{ServiceAccountEmail: pusher}},
		},
	})
	s, err := subscriber.Open(testContext(t), client, subID, subscriber.WithTokenValidator(validator))
	require.NoError(t, err)
	rec := &seqRecorder{}
	mux.Handle("/push", s.PushHandler(func(_ context.Context, d *subscriber.Delivery) error {
		rec.add(d)
		return nil
	}))
	t.Cleanup(func() { require.NoError(t, s.Close(context.Background())) })

	st := func(n uint64) ordering.Stamp { return ordering.Stamp{Producer: "p", Seq: n} }
	for _, err := range publishStamped(t, client, s.Topic(), []stamped{{"k", "k/5", st(5)}}) {
		require.NoError(t, err)
	}
	require.NoError(t, srv.WaitFor(testContext(t), func() bool { _, d := rec.snapshot(); return len(d) == 1 }))
	attrs := map[string]string{subscriber.DeadLetterSourceAttribute: path(client, "subscriptions", subID)}
	st(3).Put(attrs)
	publishAttrs(t, client, s.Topic(), "k", "k/3", attrs)
	require.NoError(t, srv.WaitFor(testContext(t), func() bool { return srv.Stats(s.Name()).Acked == 2 }))
	_, data := rec.snapshot()
	assert.Equal(t, []string{"k/5", "k/3"}, data, "the redriven k/3 ran")
	assert.Zero(t, s.Stats().Duplicates)
}

// TestParkedCopyAckFails: on an exactly-once subscription with parking, a
// stamped copy of a processed message arrives while its key is parked and
// goes to the parking topic; its ack is refused, and the service sends it
// again. The refused ack makes nothing owed, so the release skips the copy
// as S12 says: the message does not run twice, nor after its successor.
func TestParkedCopyAckFails(t *testing.T) {
	t.Parallel()
	e := newParkEnv(t, []orderingtest.Option{orderingtest.WithAckDeadline(300 * time.Millisecond)},
		subscriber.WithExactlyOnceDelivery(), subscriber.WithParkingWait(100*time.Millisecond))
	require.True(t, e.sub.ExactlyOnce())
	refused := e.srv.FailAcks(orderingtest.Data("k/1-copy"), orderingtest.PermanentAckFailure, 1)
	st := func(n uint64) ordering.Stamp { return ordering.Stamp{Producer: "p", Seq: n} }
	var fixed atomic.Bool
	var mu sync.Mutex
	var calls []string
	stop := start(t, e.sub, func(_ context.Context, d *subscriber.Delivery) error {
		mu.Lock()
		defer mu.Unlock()
		calls = append(calls, string(d.Data))
		if string(d.Data) == "k/2" && !fixed.Load() {
			return subscriber.Permanent(errInjected)
		}
		return nil
	})
	for _, err := range publishStamped(t, e.client, e.topic, []stamped{{"k", "k/1", st(1)}, {"k", "k/2", st(2)}}) {
		require.NoError(t, err)
	}
	e.awaitParked(t, "k", 1)
	for _, err := range publishStamped(t, e.client, e.topic, []stamped{{"k", "k/1-copy", st(1)}}) {
		require.NoError(t, err)
	}
	require.NoError(t, e.srv.WaitFor(testContext(t), func() bool {
		return refused.Hits() == 1 && e.srv.Stats(e.sub.Name()).Outstanding == 0 && countOf(e.parkedData(), "k/1-copy") >= 2
	}), "the copy is parked, its ack refused, and parked again: %s", e.describe())
	fixed.Store(true)
	require.NoError(t, e.sub.Release(testContext(t), "k"))
	stop()
	mu.Lock()
	defer mu.Unlock()
	assert.Equal(t, []string{"k/1", "k/2", "k/2"}, calls, "k/2 failed, then ran in the release; the copy never ran")
}

// TestPushCloseDrainsReleases: Close on a push endpoint lets a running
// release's handler call finish within the drain timeout, as it lets a
// push's, rather than cancelling it at once.
func TestPushCloseDrainsReleases(t *testing.T) {
	t.Parallel()
	topic, _ := names()
	park := "parked-" + topic
	var fixed atomic.Bool
	running, proceed := make(chan struct{}), make(chan struct{})
	handlerErr := make(chan error, 1)
	e := newPushSub(t, subscriber.WithParking(park), subscriber.WithParkingWait(100*time.Millisecond),
		subscriber.WithDrainTimeout(testTimeout))
	e.mux.Handle("/push", e.sub.PushHandler(func(ctx context.Context, d *subscriber.Delivery) error {
		if string(d.Data) != "k/1" {
			return nil
		}
		if !fixed.Load() {
			return subscriber.Permanent(errInjected)
		}
		close(running)
		select {
		case <-proceed:
			handlerErr <- nil
			return nil
		case <-ctx.Done():
			handlerErr <- ctx.Err()
			return ctx.Err()
		}
	}))
	pe := parkEnv{fakeEnv: e.fakeEnv, parkTopic: path(e.client, "topics", park)}
	e.publishSeqs(t, "k", 1, 2)
	pe.awaitParked(t, "k", 2)
	fixed.Store(true)
	released := make(chan error, 1)
	go func() { released <- e.sub.Release(testContext(t), "k") }()
	select {
	case <-running:
	case <-time.After(testTimeout):
		t.Fatalf("the release did not run: %s", pe.describe())
	}
	closed := e.closing(t)
	close(proceed)
	assert.NoError(t, <-handlerErr, "the release's call was not cancelled")
	assert.ErrorIs(t, await(t, released), subscriber.ErrNotReceiving, "it starts nothing after k/1 once stopping (S7)")
	require.NoError(t, <-closed)
	assert.EqualValues(t, 1, e.sub.Stats().Released, "k/1 ran to its end and was recorded")
}

// TestPushCloseReturnsByItsContext: a push of a parked key is on its way
// to the parking topic, whose publish hangs. Close returns by its ctx,
// with ctx.Err(), rather than waiting for the move without bound; the move
// is given up, and the push answered for the service to send again.
func TestPushCloseReturnsByItsContext(t *testing.T) {
	t.Parallel()
	tr := newTracker(nil, 0)
	tr.expect("k", 1)
	e, pe, _ := newParkingPushEnv(t, tr)
	e.publishSeqs(t, "k", 1, 2)
	pe.awaitParked(t, "k", 1)
	hung := e.srv.HoldPublish(func(m *pubsubpb.PubsubMessage) bool {
		_, copied := m.GetAttributes()[subscriber.AttrParkID]
		return copied && string(m.GetData()) == "k/3"
	})
	defer hung.Remove()
	e.publishSeqs(t, "k", 3, 3)
	require.NoError(t, e.srv.WaitFor(testContext(t), func() bool { return hung.Hits() > 0 }), "k/3's move to the parking topic hangs")

	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	began := time.Now()
	err := e.sub.Close(ctx)
	took := time.Since(began)
	assert.ErrorIs(t, err, context.DeadlineExceeded)
	assert.Less(t, took, 3*time.Second, "Close returned by its ctx")
	assert.Equal(t, []string{"k/2"}, pe.parkedData(), "k/3 was not parked")
}

// TestReleaseRequestGoexit: a Receive carries out a release request, and
// user code in it exits its goroutine: the handler, on the first call of
// the released message, or the WithKeyEvents callback, told of the
// unpark. Either way the key is left unmarked, the release goes on or the
// request is finished, and Receive returns once its ctx ends.
func TestReleaseRequestGoexit(t *testing.T) {
	t.Parallel()
	for _, where := range []string{"handler", "callback"} {
		t.Run(where, func(t *testing.T) {
			t.Parallel()
			e := newParkEnv(t, nil, subscriber.WithMaxAttempts(1), subscriber.WithParkingWait(100*time.Millisecond))
			e.publishSeqs(t, "k", 1, 3)
			var fixed, exited atomic.Bool
			exit := func() {
				if exited.CompareAndSwap(false, true) {
					runtime.Goexit()
				}
			}
			var unparked atomic.Bool
			opts := []subscriber.Option{subscriber.WithMaxAttempts(3), subscriber.WithParkingWait(100 * time.Millisecond),
				subscriber.WithKeyEvents(func(ev subscriber.KeyEvent) {
					if ev.Kind == subscriber.KeyUnparked {
						unparked.Store(true)
						if where == "callback" {
							exit()
						}
					}
				})}
			service := e.reopen(t, e.client, opts...)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			done := make(chan error, 1)
			go func() {
				done <- service.Receive(ctx, func(_ context.Context, d *subscriber.Delivery) error {
					if string(d.Data) != "k/2" {
						return nil
					}
					if !fixed.Load() {
						return errInjected
					}
					if where == "handler" {
						exit()
					}
					return nil
				})
			}()
			e.awaitParked(t, "k", 2)
			retried := service.Stats().Retried
			fixed.Store(true)
			require.NoError(t, e.sub.RequestRelease(testContext(t), "k"))
			require.NoError(t, e.srv.WaitFor(testContext(t), func() bool {
				list, err := e.sub.Parked(testContext(t))
				return err == nil && len(list) == 0 && unparked.Load()
			}), "the request was carried out: %s", e.describe())
			assert.True(t, exited.Load())
			cancel()
			select {
			case err := <-done:
				require.NoError(t, err)
			case <-time.After(testTimeout):
				t.Fatal("Receive did not return: the key was left marked")
			}
			if where == "handler" {
				assert.EqualValues(t, retried+1, service.Stats().Retried, "the exit was a failed call, retried")
			}
		})
	}
}

// TestRequestClaimedWhenLocalReleaseEnds: a release request arrives for a
// key that a Release in the running Receive is releasing, so the Receive
// does not claim it. When that Release gives up, the request is claimed
// at once, not at the log's next unrelated event.
func TestRequestClaimedWhenLocalReleaseEnds(t *testing.T) {
	t.Parallel()
	e := newParkEnv(t, nil, subscriber.WithMaxAttempts(100), subscriber.WithParkingWait(100*time.Millisecond),
		subscriber.WithBackoff(10*time.Millisecond, 10*time.Millisecond))
	e.publishSeqs(t, "k", 1, 2)
	var phase atomic.Int32 // 0: k/1 fails for good; 1: it fails, to be retried; 2: it runs
	stop := start(t, e.sub, func(_ context.Context, d *subscriber.Delivery) error {
		if string(d.Data) != "k/1" {
			return nil
		}
		switch phase.Load() {
		case 0:
			return subscriber.Permanent(errInjected)
		case 1:
			return errInjected
		}
		return nil
	})
	e.awaitParked(t, "k", 2)
	phase.Store(1)
	ctx, cancel := context.WithCancel(testContext(t))
	local := make(chan error, 1)
	go func() { local <- e.sub.Release(ctx, "k") }()
	e.awaitKey(t, "k", "released here", func(k subscriber.ParkedKey) bool { return k.Releasing })

	operator := e.reopen(t, harness.Client(t, e.srv.Addr))
	require.NoError(t, operator.RequestRelease(testContext(t), "k"))
	e.awaitRequested(t, "k")
	phase.Store(2)
	cancel()
	require.ErrorIs(t, await(t, local), context.Canceled)
	waitCtx, waitCancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer waitCancel()
	require.NoError(t, e.srv.WaitFor(waitCtx, func() bool {
		list, err := e.sub.Parked(waitCtx)
		return err == nil && len(list) == 0
	}), "the request was not claimed when the local release ended: %s", e.describe())
	stop()
}

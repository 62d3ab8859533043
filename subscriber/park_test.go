package subscriber_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/api/option"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/keyorder/keyorder/internal/harness"
	"github.com/keyorder/keyorder/ordering"
	"github.com/keyorder/keyorder/ordering/orderingtest"
	"github.com/keyorder/keyorder/publisher"
	"github.com/keyorder/keyorder/subscriber"
)

// TestParkingPoisonMidKey: key-2's fourth message is poison. The key's
// first three messages run; the poison message and the six after it are
// parked, in order, with their key and the documented attributes, and
// acked; every other key finishes; Parked lists the key, from the running
// Receive and from a replay of the log once it has stopped.
func TestParkingPoisonMidKey(t *testing.T) {
	t.Parallel()
	keys := keyNames(5)
	const perKey = 10
	e := newParkEnv(t, nil, subscriber.WithWorkers(4), subscriber.WithMaxAttempts(3))
	e.publish(t, keys, perKey)
	tr := newTracker(append(keyNames(2), keys[3:]...), perKey)
	tr.expect("key-2", 3)
	var during []subscriber.ParkedKey
	tr.receiveUntil(t, e.sub, tr.handler(func(_ context.Context, d *subscriber.Delivery) error {
		if string(d.Data) == "key-2/4" {
			return fmt.Errorf("poison: %w", errInjected)
		}
		return nil
	}), func(ctx context.Context) error {
		if err := e.srv.WaitFor(ctx, func() bool {
			return len(e.srv.Messages(e.parkTopic)) == 7 && e.srv.Stats(e.sub.Name()).Outstanding == 0
		}); err != nil {
			return err
		}
		var err error
		during, err = e.sub.Parked(ctx)
		return err
	})
	assert.Equal(t, 3, tr.callsOf("key-2/4"), "the poison message had its attempts")
	assert.Zero(t, tr.callsOf("key-2/5"), "nothing after it ran")

	// The parked copies, in order, with their key and attributes.
	parked := e.srv.Messages(e.parkTopic)
	require.Equal(t, seqs("key-2", 4, 10), e.parkedData())
	originals := map[string]orderingtest.Message{}
	for _, m := range e.srv.Messages(e.topic) {
		originals[string(m.Data)] = m
	}
	for i, m := range parked {
		orig := originals[string(m.Data)]
		assert.Equal(t, "key-2", m.OrderingKey)
		assert.Equal(t, orig.ID, m.Attributes[subscriber.AttrMessageID])
		assert.Equal(t, e.sub.Name(), m.Attributes[subscriber.AttrSubscription])
		assert.Equal(t, orig.PublishTime.UTC().Format(time.RFC3339Nano), m.Attributes[subscriber.AttrPublishTime])
		assert.NotEmpty(t, m.Attributes[subscriber.AttrParkID])
		assert.Equal(t, parked[0].Attributes[subscriber.AttrParkID], m.Attributes[subscriber.AttrParkID], "one park")
		assert.NotContains(t, m.Attributes, "partition-key", "the key is the ordering key (P2)")
		// The original's stamp, from the publisher that published it.
		want, err := ordering.ParseStamp(orig.Attributes)
		require.NoError(t, err)
		require.False(t, want.IsZero(), "the original is stamped")
		got, err := ordering.ParseStamp(m.Attributes)
		require.NoError(t, err)
		assert.Equal(t, want, got, "the copy keeps the original's stamp")
		if i == 0 {
			assert.Equal(t, "3", m.Attributes[subscriber.AttrAttempts])
			assert.Equal(t, "poison: "+errInjected.Error(), m.Attributes[subscriber.AttrError])
		} else {
			assert.Equal(t, "0", m.Attributes[subscriber.AttrAttempts])
			assert.NotContains(t, m.Attributes, subscriber.AttrError)
		}
	}
	st := e.sub.Stats()
	assert.Equal(t, int64(7), st.Parked)
	assert.Equal(t, int64(1), st.Failed, "the poison message failed for good, and parked its key")
	assert.Zero(t, e.srv.Stats(e.sub.Name()).Nacked, "nothing of the key went back to the service")

	after, err := e.sub.Parked(testContext(t))
	require.NoError(t, err)
	for _, list := range [][]subscriber.ParkedKey{during, after} {
		require.Len(t, list, 1)
		k := list[0]
		assert.Equal(t, "key-2", k.Key)
		assert.Equal(t, 7, k.Messages)
		assert.Equal(t, originals["key-2/4"].ID, k.MessageID)
		assert.Equal(t, "poison: "+errInjected.Error(), k.LastError)
		assert.False(t, k.Releasing)
		assert.WithinDuration(t, time.Now(), k.Since, testTimeout)
	}
}

// TestReleaseAfterTheFix: key-1 parks at its fourth message; five more of
// its messages are published and parked behind it. Once the handler is
// fixed, Release runs the seven parked messages, once each, in order, and
// the key's later messages run after them. The tracker sees every message
// of every key exactly once, in publish order.
func TestReleaseAfterTheFix(t *testing.T) {
	t.Parallel()
	keys := keyNames(3)
	const perKey = 10
	var (
		mu     sync.Mutex
		events []subscriber.KeyEvent
	)
	e := newParkEnv(t, nil, subscriber.WithWorkers(2), subscriber.WithMaxAttempts(2),
		subscriber.WithKeyEvents(func(ev subscriber.KeyEvent) {
			mu.Lock()
			defer mu.Unlock()
			events = append(events, ev)
		}))
	e.publish(t, keys, perKey)
	tr := newTracker([]string{"key-0", "key-2"}, perKey)
	tr.expect("key-1", 20)
	var broken atomic.Bool
	broken.Store(true)
	stamps := map[string]ordering.Stamp{} // by data, as the handler saw them
	stop := start(t, e.sub, tr.handler(func(_ context.Context, d *subscriber.Delivery) error {
		if string(d.Data) == "key-1/4" && broken.Load() {
			return subscriber.Permanent(errInjected)
		}
		mu.Lock()
		defer mu.Unlock()
		stamps[string(d.Data)] = ordering.Stamp{Producer: d.Producer, Seq: d.Seq}
		return nil
	}))
	e.awaitParked(t, "key-1", 7)
	e.publishSeqs(t, "key-1", 11, 15)
	e.awaitParked(t, "key-1", 12)
	assert.Equal(t, 3, tr.processed("key-1"))
	assert.Equal(t, 1, tr.callsOf("key-1/4"), "a permanent error parks at once")

	broken.Store(false)
	require.NoError(t, e.sub.Release(testContext(t), "key-1"))
	assert.Equal(t, 15, tr.processed("key-1"), "Release returns once the parked messages ran")
	list, err := e.sub.Parked(testContext(t))
	require.NoError(t, err)
	assert.Empty(t, list)
	require.ErrorIs(t, e.sub.Release(testContext(t), "key-1"), subscriber.ErrNotParked)
	mu.Lock()
	require.Len(t, events, 2, "%+v", events)
	assert.Equal(t, subscriber.KeyParked, events[0].Kind)
	assert.Equal(t, "key-1", events[0].Key)
	assert.ErrorContains(t, events[0].Err, errInjected.Error())
	assert.Equal(t, subscriber.KeyUnparked, events[1].Kind)
	assert.Equal(t, subscriber.ReasonReleased, events[1].Reason)
	assert.Equal(t, events[0].MessageID, events[1].MessageID, "the message that parked the key")
	// A released message is the original, stamp and all (S12).
	for _, m := range e.srv.Messages(e.topic) {
		if m.OrderingKey != "key-1" {
			continue
		}
		want, err := ordering.ParseStamp(m.Attributes)
		require.NoError(t, err)
		assert.Equal(t, want, stamps[string(m.Data)], "%s", m.Data)
	}
	mu.Unlock()

	e.publishSeqs(t, "key-1", 16, 20)
	select {
	case <-tr.done:
	case <-time.After(testTimeout):
		t.Fatalf("key-1 has %d processed", tr.processed("key-1"))
	}
	stop()
	tr.verify(t)
	st := e.sub.Stats()
	assert.Equal(t, int64(12), st.Parked)
	assert.Equal(t, int64(12), st.Released)
}

// TestRestartWhileParked: key-0 parks, and Receive stops. A new
// Subscription, through Open, receives the key's new messages: none runs,
// each is parked behind the others, and Parked still lists the key. Other
// keys run.
func TestRestartWhileParked(t *testing.T) {
	t.Parallel()
	e := newParkEnv(t, nil, subscriber.WithMaxAttempts(1))
	e.publishSeqs(t, "key-0", 1, 3)
	tr := newTracker(nil, 0)
	tr.expect("key-0", 1)
	tr.receiveUntil(t, e.sub, tr.handler(func(_ context.Context, d *subscriber.Delivery) error {
		if string(d.Data) == "key-0/2" {
			return errInjected
		}
		return nil
	}), e.settled(func(orderingtest.Stats) bool { return len(e.parkedData()) == 2 }))

	again := e.reopen(t, e.client)
	e2 := e
	e2.sub = again
	tr2 := newTracker(nil, 0)
	tr2.expect("key-1", 5)
	stop := start(t, again, tr2.handler(func(context.Context, *subscriber.Delivery) error { return nil }))
	e.publishSeqs(t, "key-0", 4, 8)
	e.publishSeqs(t, "key-1", 1, 5)
	k := e2.awaitParked(t, "key-0", 7)
	select {
	case <-tr2.done:
	case <-time.After(testTimeout):
		t.Fatal("key-1 did not finish")
	}
	stop()
	tr2.verify(t)
	assert.Equal(t, seqs("key-0", 2, 8), e.parkedData())
	assert.Equal(t, errInjected.Error(), k.LastError)
	for _, d := range seqs("key-0", 2, 8) {
		assert.Zero(t, tr2.callsOf(d), "%s ran", d)
	}
	assert.Equal(t, int64(5), again.Stats().Parked)
}

// TestReleasedMessageFailsAgain: a parked message that fails for good in a
// release parks the key again: Release stops there with ErrParkedAgain,
// the messages before it stay released, and the rest stay parked, with the
// new error. A later release, after the fix, goes on from there. The
// release runs in the Receive of the Subscription Release is called on,
// or is requested from a Subscription with no Receive, as an operator's
// command is, and carried out by another process's Receive: the failure
// then ends the request, which Parked no longer shows.
func TestReleasedMessageFailsAgain(t *testing.T) {
	t.Parallel()
	for _, requested := range []bool{false, true} {
		t.Run(map[bool]string{false: "here", true: "requested"}[requested], func(t *testing.T) {
			t.Parallel()
			e := newParkEnv(t, nil, subscriber.WithMaxAttempts(2))
			e.publishSeqs(t, "key-0", 1, 8)
			receiving := e.sub
			if requested {
				receiving = e.reopen(t, e.client, subscriber.WithMaxAttempts(2))
			}
			tr := newTracker(nil, 0)
			tr.expect("key-0", 8)
			var fixed atomic.Int32 // the messages from this one on succeed
			fixed.Store(3)
			stop := start(t, receiving, tr.handler(func(_ context.Context, d *subscriber.Delivery) error {
				if _, seq := parse(d); seq >= int(fixed.Load()) && seq <= 5 {
					return fmt.Errorf("bad %d: %w", seq, errInjected)
				}
				return nil
			}))
			e.awaitParked(t, "key-0", 6) // 3..8
			fixed.Store(5)               // 3 and 4 are fixed, 5 is not
			err := e.sub.Release(testContext(t), "key-0")
			require.ErrorIs(t, err, subscriber.ErrParkedAgain)
			assert.ErrorContains(t, err, "bad 5: "+errInjected.Error())
			if !requested {
				require.ErrorIs(t, err, errInjected) // a request's outcome has the error's text only
			}
			assert.Equal(t, 4, tr.processed("key-0"))
			k := e.awaitParked(t, "key-0", 4) // 5..8
			assert.Equal(t, "bad 5: "+errInjected.Error(), k.LastError)
			assert.False(t, k.Releasing)
			assert.Zero(t, k.ReleaseRequested, "no request is pending")
			assert.Empty(t, k.ReleaseRequestedBy)
			assert.Equal(t, 2, tr.callsOf("key-0/5"), "it had its attempts")

			fixed.Store(6)
			if requested {
				// From the Receive's own Subscription, this time.
				require.NoError(t, receiving.RequestRelease(testContext(t), "key-0"))
			} else {
				require.NoError(t, e.sub.Release(testContext(t), "key-0"))
			}
			awaitDone(t, tr, "key-0")
			stop()
			tr.verify(t)
		})
	}
}

// TestParkingWinsOverDeadLettering: on a subscription with a dead-letter
// policy, a message that fails for good is parked and acked, not nacked
// towards the dead-letter topic, and so are the later messages of its key.
// Nothing reaches the dead-letter topic, and nothing is lost: the release
// runs all of it.
func TestParkingWinsOverDeadLettering(t *testing.T) {
	t.Parallel()
	topic, _ := names()
	dlq := "dead-" + topic
	e := newParkEnv(t, nil, subscriber.WithMaxAttempts(1), subscriber.WithDeadLetterPolicy(dlq, 5))
	dlTopic, _ := e.sub.DeadLetterPolicy()
	require.Equal(t, path(e.client, "topics", dlq), dlTopic)
	e.publishSeqs(t, "key-0", 1, 5)
	tr := newTracker(nil, 0)
	tr.expect("key-0", 5)
	var broken atomic.Bool
	broken.Store(true)
	stop := start(t, e.sub, tr.handler(func(_ context.Context, d *subscriber.Delivery) error {
		if string(d.Data) == "key-0/2" && broken.Load() {
			return errInjected
		}
		return nil
	}))
	e.awaitParked(t, "key-0", 4)
	assert.Zero(t, e.srv.Stats(e.sub.Name()).DeadLettered)
	broken.Store(false)
	require.NoError(t, e.sub.Release(testContext(t), "key-0"))
	stop()
	tr.verify(t)
	assert.Empty(t, e.srv.Messages(dlTopic))
	assert.Zero(t, e.sub.Stats().DeadLettered)
}

// TestParkingTwoProcesses: two processes, A and B, receive one
// subscription. A parks key-0 while B's view of the control log lags (its
// follower's stream is held back). A then stops, and the key's next
// message goes to B, which must not run it: B does not hold the key, so
// the message waits for B's barrier marker to come back, by which time B
// has seen the park, and parks the message. Without the barrier, B would
// run it at once.
func TestParkingTwoProcesses(t *testing.T) {
	t.Parallel()
	e := newParkEnv(t, nil, subscriber.WithMaxAttempts(1))
	g := newGate()
	clientB := harness.Client(t, e.srv.Addr, option.WithGRPCDialOption(grpc.WithStreamInterceptor(g.interceptor())))
	subA, subB := e.sub, e.reopen(t, clientB)
	eB := e
	eB.sub = subB

	holding, release := make(chan struct{}), make(chan struct{})
	trA := newTracker(nil, 0)
	trA.expect("key-0", 1)
	stopA := start(t, subA, trA.handler(func(_ context.Context, d *subscriber.Delivery) error {
		switch string(d.Data) {
		case "key-0/1":
			close(holding)
			<-release // key-0 stays outstanding on A meanwhile
		case "key-0/2":
			return subscriber.Permanent(errInjected)
		}
		return nil
	}))
	e.publishSeqs(t, "key-0", 1, 1)
	<-holding

	var callsB atomic.Int32
	stopB := start(t, subB, func(_ context.Context, d *subscriber.Delivery) error {
		callsB.Add(1)
		return nil
	})
	ctx := testContext(t)
	require.NoError(t, e.srv.WaitFor(ctx, func() bool { return e.srv.Stats(e.sub.Name()).Streams == 2 }), "B receives")
	g.shut()

	e.publishSeqs(t, "key-0", 2, 4) // to A, which holds the key
	close(release)
	e.awaitParked(t, "key-0", 3)
	stopA()

	_, subID := splitName(e.sub.Name())
	control := path(e.client, "topics", subID+"-parking-control")
	markers := func() int {
		n := 0
		for _, m := range e.srv.Messages(control) {
			if _, ok := m.Attributes["keyorder-to"]; ok {
				n++
			}
		}
		return n
	}
	before := markers()
	e.publishSeqs(t, "key-0", 5, 5)
	id := e.srv.Messages(e.topic)[4].ID
	require.NoError(t, e.srv.WaitFor(ctx, func() bool {
		delivered := false
		for _, d := range e.srv.Deliveries(e.sub.Name()) {
			delivered = delivered || d.MessageID == id
		}
		return delivered && (markers() > before || callsB.Load() > 0)
	}), "key-0/5 reached B, which sent a marker or ran it")
	assert.Zero(t, callsB.Load(), "B ran key-0/5 while its view lagged")

	g.lift()
	eB.awaitParked(t, "key-0", 4)
	stopB()
	assert.Zero(t, callsB.Load())
	assert.Equal(t, seqs("key-0", 2, 5), e.parkedData())
}

// splitName splits projects/P/subscriptions/S into P and S.
func splitName(name string) (project, id string) {
	rest := strings.TrimPrefix(name, "projects/")
	project, id, _ = strings.Cut(rest, "/subscriptions/")
	return project, id
}

// TestReleaseInterruptedByARestart: a release of key-0's nine parked
// messages stops after the fourth, and a new process, through Open,
// releases the rest: every message runs once, in order. The release stops
// either as a Receive that shuts down does, recording that it stopped, or
// as a process that dies does, without a word: the new process then takes
// the release over once the dead one's claim has lapsed. Not parallel: it
// shortens the release lease, which every process shares.
func TestReleaseInterruptedByARestart(t *testing.T) {
	defer subscriber.SetReleaseLease(time.Second)()
	for _, crash := range []bool{false, true} {
		t.Run(map[bool]string{false: "shutdown", true: "crash"}[crash], func(t *testing.T) {
			e := newParkEnv(t, nil, subscriber.WithMaxAttempts(1), subscriber.WithDrainTimeout(50*time.Millisecond), subscriber.WithParkingWait(50*time.Millisecond))
			released := make(chan error, 1)
			tr := interruptRelease(t, e, e.sub, crash, func() {
				go func() { released <- e.sub.Release(context.Background(), "key-0") }()
			})
			require.ErrorIs(t, <-released, subscriber.ErrNotReceiving)

			again := e.reopen(t, e.client, subscriber.WithMaxAttempts(1))
			eB := e
			eB.sub = again
			stop := start(t, again, tr.handler(func(context.Context, *subscriber.Delivery) error { return nil }))
			k := eB.awaitParked(t, "key-0", 5)
			assert.Equal(t, crash, k.Releasing, "a claim lasts until it lapses")
			rctx := testContext(t)
			for {
				err := again.Release(rctx, "key-0")
				if !crash || !errors.Is(err, subscriber.ErrReleasing) {
					require.NoError(t, err)
					break
				}
				// The dead process's claim lapses with its lease, which
				// nothing announces: try again a tenth of a lease later
				// rather than spin, since each Release publishes a claim.
				select {
				case <-time.After(100 * time.Millisecond):
				case <-rctx.Done():
					t.Fatalf("the dead process's claim never lapsed: %v", err)
				}
			}
			select {
			case <-tr.done:
			case <-time.After(testTimeout):
				t.Fatalf("key-0 has %d processed", tr.processed("key-0"))
			}
			stop()
			tr.verify(t)
		})
	}
}

// interruptRelease parks key-0's messages 2 to 10 in a Receive of first,
// then calls release, which must start a release that the Receive runs,
// and stops the Receive when the release reaches message 6: as a Receive
// that shuts down does, recording that its release stopped, or, with
// crash, as a dying process does, without a word. It returns the
// tracker, which has seen messages 1 to 5 of the 10 it expects.
func interruptRelease(t *testing.T, e parkEnv, first *subscriber.Subscription, crash bool, release func()) *tracker {
	t.Helper()
	e.publishSeqs(t, "key-0", 1, 10)
	tr := newTracker(nil, 0)
	tr.expect("key-0", 10)
	var fixed atomic.Bool
	interrupt := make(chan struct{})
	var once sync.Once
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		done <- first.Receive(ctx, tr.handler(func(hctx context.Context, d *subscriber.Delivery) error {
			switch _, seq := parse(d); {
			case seq == 2 && !fixed.Load():
				return errInjected
			case seq == 6:
				// The release is interrupted here: this call fails once
				// Receive has stopped, so the message is not processed.
				once.Do(func() { close(interrupt) })
				<-hctx.Done()
				return hctx.Err()
			}
			return nil
		}))
	}()
	e.awaitParked(t, "key-0", 9)
	fixed.Store(true)
	if crash {
		// The dying process cannot record that its release stopped.
		e.srv.FailPublish(func(m *pubsubpb.PubsubMessage) bool {
			return strings.Contains(string(m.Data), `"kind":"stop"`)
		}, codes.PermissionDenied, 0)
	}
	release()
	select {
	case <-interrupt:
	case <-time.After(testTimeout):
		t.Fatalf("the release never reached key-0/6: %s", e.describe())
	}
	cancel()
	require.NoError(t, <-done)
	assert.Equal(t, 5, tr.processed("key-0"))
	return tr
}

// TestParkingTopics checks that CreateWithTopic and Open create the parking
// and control topics when they are missing, with message retention, and
// refuse what parking cannot work with.
func TestParkingTopics(t *testing.T) {
	t.Parallel()
	_, client := harness.Fake(t)
	ctx := testContext(t)
	retention := func(topic string) time.Duration {
		got, err := client.TopicAdminClient.GetTopic(ctx, &pubsubpb.GetTopicRequest{Topic: topic})
		require.NoError(t, err, topic)
		return got.GetMessageRetentionDuration().AsDuration()
	}
	t.Run("CreateWithTopic", func(t *testing.T) {
		topic, subID := names()
		_, err := subscriber.CreateWithTopic(ctx, client, topic, subID, subscriber.WithParking("parked-"+topic))
		require.NoError(t, err)
		assert.Equal(t, 31*24*time.Hour, retention(path(client, "topics", "parked-"+topic)))
		assert.Equal(t, 31*24*time.Hour, retention(path(client, "topics", subID+"-parking-control")))
	})
	t.Run("Open", func(t *testing.T) {
		topic, subID := names()
		createDirectly(t, client, &pubsubpb.Subscription{
			Name: path(client, "subscriptions", subID), Topic: path(client, "topics", topic), EnableMessageOrdering: true,
		})
		// An existing parking topic is used as it is.
		_, err := client.TopicAdminClient.CreateTopic(ctx, &pubsubpb.Topic{
			Name: path(client, "topics", "parked-"+topic), MessageRetentionDuration: durationpb.New(time.Hour),
		})
		require.NoError(t, err)
		_, err = subscriber.Open(ctx, client, subID, subscriber.WithParking("parked-"+topic))
		require.NoError(t, err)
		assert.Equal(t, time.Hour, retention(path(client, "topics", "parked-"+topic)))
		assert.Equal(t, 31*24*time.Hour, retention(path(client, "topics", subID+"-parking-control")))
	})
	t.Run("a parking topic without retention", func(t *testing.T) {
		topic, subID := names()
		_, err := client.TopicAdminClient.CreateTopic(ctx, &pubsubpb.Topic{Name: path(client, "topics", "parked-"+topic)})
		require.NoError(t, err)
		_, err = subscriber.CreateWithTopic(ctx, client, topic, subID, subscriber.WithParking("parked-"+topic))
		require.ErrorIs(t, err, subscriber.ErrInvalidConfig)
		assert.Contains(t, err.Error(), "retention")
	})
	t.Run("an unordered subscription", func(t *testing.T) {
		topic, subID := names()
		createDirectly(t, client, &pubsubpb.Subscription{Name: path(client, "subscriptions", subID), Topic: path(client, "topics", topic)})
		_, err := subscriber.Open(ctx, client, subID, subscriber.WithParking("parked-"+topic))
		require.ErrorIs(t, err, subscriber.ErrInvalidConfig)
		assert.Contains(t, err.Error(), "ordering")
	})
	t.Run("without parking", func(t *testing.T) {
		topic, subID := names()
		s, err := subscriber.CreateWithTopic(ctx, client, topic, subID)
		require.NoError(t, err)
		_, err = s.Parked(ctx)
		require.ErrorIs(t, err, subscriber.ErrNoParking)
		require.ErrorIs(t, s.Release(ctx, "k"), subscriber.ErrNoParking)
		require.ErrorIs(t, s.RequestRelease(ctx, "k"), subscriber.ErrNoParking)
	})
	t.Run("Receive with a context ended", func(t *testing.T) {
		topic, subID := names()
		s, err := subscriber.CreateWithTopic(ctx, client, topic, subID, subscriber.WithParking("parked-"+topic))
		require.NoError(t, err)
		ended, cancel := context.WithCancel(ctx)
		cancel()
		require.NoError(t, s.Receive(ended, func(context.Context, *subscriber.Delivery) error { return nil }))
	})
	t.Run("not receiving", func(t *testing.T) {
		topic, subID := names()
		s, err := subscriber.CreateWithTopic(ctx, client, topic, subID, subscriber.WithParking("parked-"+topic))
		require.NoError(t, err)
		// Release asks through the control log, for a Receive elsewhere:
		// it finds the key not parked.
		require.ErrorIs(t, s.Release(ctx, "k"), subscriber.ErrNotParked)
		list, err := s.Parked(ctx)
		require.NoError(t, err)
		assert.Empty(t, list)
	})
}

// TestReceiveFailsWithoutTheControlLog: a Receive whose view of the
// control log is lost, here because its subscription on the control topic
// was deleted, cannot tell which keys are parked, so it stops and returns
// the error rather than run what it should not.
func TestReceiveFailsWithoutTheControlLog(t *testing.T) {
	t.Parallel()
	e := newParkEnv(t, nil)
	ctx := testContext(t)
	done := make(chan error, 1)
	go func() { done <- e.sub.Receive(ctx, func(context.Context, *subscriber.Delivery) error { return nil }) }()
	_, subID := splitName(e.sub.Name())
	var follower string
	require.NoError(t, e.srv.WaitFor(ctx, func() bool {
		if e.srv.Stats(e.sub.Name()).Streams == 0 {
			return false // still catching up: it may read the log through another
		}
		for _, s := range e.srv.Subscriptions() {
			if strings.Contains(s, subID+"-parking-") && e.srv.Stats(s).Streams > 0 {
				follower = s
				return true
			}
		}
		return false
	}))
	require.NoError(t, e.client.SubscriptionAdminClient.DeleteSubscription(ctx, &pubsubpb.DeleteSubscriptionRequest{Subscription: follower}))
	select {
	case err := <-done:
		require.Error(t, err)
		assert.Contains(t, err.Error(), "parking control log")
	case <-ctx.Done():
		t.Fatal("Receive went on without the control log")
	}
}

// TestReleaseWhileMessagesArrive: two processes receive one subscription
// while key-0's messages keep coming, one at a time, and B releases the
// key mid-stream. Messages parked while the release runs are released by
// it; those that come after it unparks the key run directly, on either
// process; a flight that was on its way when the key was unparked runs its
// messages instead. The tracker, shared by both, sees every message of
// the key once, in publish order.
func TestReleaseWhileMessagesArrive(t *testing.T) {
	t.Parallel()
	const total = 40
	e := newParkEnv(t, nil, subscriber.WithMaxAttempts(1))
	clientB := harness.Client(t, e.srv.Addr)
	subA, subB := e.sub, e.reopen(t, clientB, subscriber.WithMaxAttempts(1))
	eB := e
	eB.sub = subB
	tr := newTracker(nil, 0)
	tr.expect("key-0", total)
	var fixed atomic.Bool
	h := tr.handler(func(_ context.Context, d *subscriber.Delivery) error {
		if string(d.Data) == "key-0/3" && !fixed.Load() {
			return errInjected
		}
		<-time.After(5 * time.Millisecond) // the handler's work: messages keep arriving meanwhile
		return nil
	})
	stopA, stopB := start(t, subA, h), start(t, subB, h)
	e.publishSeqs(t, "key-0", 1, 5)
	eB.awaitParked(t, "key-0", 3)

	published := make(chan struct{})
	go func() {
		defer close(published)
		for i := 6; i <= total; i++ {
			e.publishSeqs(t, "key-0", i, i)
		}
	}()
	fixed.Store(true)
	require.NoError(t, subB.Release(testContext(t), "key-0"))
	<-published
	select {
	case <-tr.done:
	case <-time.After(testTimeout):
		t.Fatalf("key-0 has %d processed; %s", tr.processed("key-0"), eB.describe())
	}
	stopA()
	stopB()
	tr.verify(t)
	t.Logf("released %d, parked %d and %d", subB.Stats().Released, subA.Stats().Parked, subB.Stats().Parked)
}

// TestReleasedStampsAreProcessed checks that parking keeps S12: a parked
// copy carries its original's stamp to the released Delivery, and the
// released numbers count as processed, so the producer's next message of
// the key, received as usual, is no gap.
func TestReleasedStampsAreProcessed(t *testing.T) {
	t.Parallel()
	gaps := make(chan subscriber.Gap, 10)
	e := newParkEnv(t, nil, subscriber.WithGapHandler(func(g subscriber.Gap) { gaps <- g }))
	ctx := testContext(t)
	p, err := publisher.New(e.client, e.topic)
	require.NoError(t, err)
	defer func() { require.NoError(t, p.Close(ctx)) }()
	pub := func(from, to int) {
		t.Helper()
		var results []*publisher.Result
		for _, data := range seqs("k", from, to) {
			results = append(results, p.Publish(ctx, &publisher.Message{Data: []byte(data)}, publisher.WithOrderingKey("k")))
		}
		for _, r := range results {
			_, err := r.Get(ctx)
			require.NoError(t, err)
		}
	}
	pub(1, 4)
	tr := newTracker(nil, 0)
	tr.expect("k", 5)
	var broken atomic.Bool
	broken.Store(true)
	var (
		mu   sync.Mutex
		seen []uint64
	)
	stop := start(t, e.sub, tr.handler(func(_ context.Context, d *subscriber.Delivery) error {
		if string(d.Data) == "k/2" && broken.Load() {
			return subscriber.Permanent(errInjected)
		}
		mu.Lock()
		defer mu.Unlock()
		assert.Equal(t, p.Producer(), d.Producer, "%s", d.Data)
		seen = append(seen, d.Seq)
		return nil
	}))
	e.awaitParked(t, "k", 3)
	broken.Store(false)
	require.NoError(t, e.sub.Release(ctx, "k"))
	pub(5, 5)
	select {
	case <-tr.done:
	case <-time.After(testTimeout):
		t.Fatalf("k has %d processed", tr.processed("k"))
	}
	stop()
	mu.Lock()
	defer mu.Unlock()
	require.Len(t, seen, 5)
	epoch, _ := ordering.SplitSeq(seen[0])
	for i, seq := range seen {
		assert.Equal(t, ordering.MakeSeq(epoch, uint32(i+1)), seq, "k/%d", i+1)
	}
	assert.Empty(t, gaps, "the released numbers were processed")
	assert.Zero(t, e.sub.Stats().Gaps)
}

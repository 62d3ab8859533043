package subscriber_test

import (
	"context"
	"fmt"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/keyorder/keyorder/internal/harness"
	"github.com/keyorder/keyorder/ordering"
	"github.com/keyorder/keyorder/subscriber"
)

// TestReleaseFromAnotherProcess: an operator's program, a Subscription
// that runs no Receive, releases a key that another process parked. Its
// Release records a request in the control log and waits; the other
// process's Receive carries it out, through its handler and the one call
// path: the parked messages run in park order, once each, and a stamped
// copy among them (a publish retried after a lost response) is skipped
// as S12 says. Parked shows the request, and who asked, while the release
// runs; Release returns nil once the key is unparked.
func TestReleaseFromAnotherProcess(t *testing.T) {
	t.Parallel()
	e := newParkEnv(t, nil, subscriber.WithMaxAttempts(1))
	const producer = "ledger-writer"
	var msgs []stamped
	for i := 1; i <= 6; i++ {
		msgs = append(msgs, stamped{key: "key-0", data: fmt.Sprintf("key-0/%d", i), stamp: ordering.Stamp{Producer: producer, Seq: uint64(i)}})
		if i == 4 {
			msgs = append(msgs, msgs[2]) // key-0/3 again, under a new message ID
		}
	}
	for _, err := range publishStamped(t, e.client, e.topic, msgs) {
		require.NoError(t, err)
	}
	service := e.reopen(t, harness.Client(t, e.srv.Addr), subscriber.WithMaxAttempts(1))
	tr := newTracker(nil, 0)
	tr.expect("key-0", 6)
	var fixed atomic.Bool
	running, proceed := make(chan struct{}), make(chan struct{})
	stop := start(t, service, tr.handler(func(_ context.Context, d *subscriber.Delivery) error {
		if string(d.Data) == "key-0/2" {
			if !fixed.Load() {
				return errInjected
			}
			close(running)
			<-proceed // the release waits here while the test looks
		}
		return nil
	}))
	k := e.awaitParked(t, "key-0", 6) // 2, 3, 4, the copy, 5, 6
	assert.Zero(t, k.ReleaseRequested)

	fixed.Store(true)
	released := make(chan error, 1)
	go func() { released <- e.sub.Release(testContext(t), "key-0") }()
	select {
	case <-running:
	case <-time.After(testTimeout):
		t.Fatalf("the request was not carried out: %s", e.describe())
	}
	k = e.awaitRequested(t, "key-0")
	assert.True(t, k.Releasing)
	assert.Contains(t, k.ReleaseRequestedBy, fmt.Sprintf("(pid %d)", os.Getpid()))
	assert.WithinDuration(t, time.Now(), k.ReleaseRequested, testTimeout)
	select {
	case err := <-released:
		t.Fatalf("Release returned %v while the release ran", err)
	default:
	}
	close(proceed)

	require.NoError(t, await(t, released))
	awaitDone(t, tr, "key-0")
	list, err := e.sub.Parked(testContext(t))
	require.NoError(t, err)
	assert.Empty(t, list)
	stop()
	tr.verify(t)
	assert.Equal(t, 1, tr.callsOf("key-0/3"), "the copy was skipped")
	st := service.Stats()
	assert.Equal(t, int64(1), st.Duplicates, "as a copy (S12)")
	assert.Equal(t, int64(6), st.Released, "the copy is released without running")
	assert.Zero(t, e.sub.Stats().Released, "nothing ran in the asker")
}

// TestReleaseRequestOutlivesARestart: the Receive carrying out a request
// stops in the middle of the release, and the next Receive, in a new
// process, finishes it: every message runs once, in order, and the asker's
// Release, which waited throughout, returns nil. The first Receive stops
// either as a Receive that shuts down does, recording that its release
// stopped, or as a process that dies does, without a word: the next one
// then takes the release over once the dead one's claim has lapsed. Not
// parallel: it shortens the release lease, which every process shares.
func TestReleaseRequestOutlivesARestart(t *testing.T) {
	defer subscriber.SetReleaseLease(time.Second)()
	for _, crash := range []bool{false, true} {
		t.Run(map[bool]string{false: "shutdown", true: "crash"}[crash], func(t *testing.T) {
			opts := []subscriber.Option{subscriber.WithMaxAttempts(1), subscriber.WithDrainTimeout(50 * time.Millisecond), subscriber.WithParkingWait(50 * time.Millisecond)}
			e := newParkEnv(t, nil, opts...)
			released := make(chan error, 1)
			tr := interruptRelease(t, e, e.reopen(t, e.client, opts...), crash, func() {
				go func() { released <- e.sub.Release(testContext(t), "key-0") }()
			})
			k := e.awaitParked(t, "key-0", 5)
			assert.NotZero(t, k.ReleaseRequested, "the request outlives the Receive")
			assert.Equal(t, crash, k.Releasing, "a claim lasts until it lapses")
			select {
			case err := <-released:
				t.Fatalf("Release returned %v with the key parked", err)
			default:
			}

			next := e.reopen(t, e.client, opts...)
			stop := start(t, next, tr.handler(func(context.Context, *subscriber.Delivery) error { return nil }))
			require.NoError(t, await(t, released))
			awaitDone(t, tr, "key-0")
			stop()
			tr.verify(t)
			assert.Equal(t, int64(5), next.Stats().Released)
		})
	}
}

// TestReleaseRequestOutlivesItsContext: no Receive runs when an operator
// asks for a release, and the operator's Release gives up: it returns
// ctx.Err(), and the request stays, which Parked shows. A Receive that
// starts later carries it out.
func TestReleaseRequestOutlivesItsContext(t *testing.T) {
	t.Parallel()
	e := newParkEnv(t, nil, subscriber.WithMaxAttempts(1))
	e.publishSeqs(t, "key-0", 1, 4)
	tr := newTracker(nil, 0)
	tr.expect("key-0", 4)
	var fixed atomic.Bool
	h := tr.handler(func(_ context.Context, d *subscriber.Delivery) error {
		if string(d.Data) == "key-0/2" && !fixed.Load() {
			return errInjected
		}
		return nil
	})
	stopFirst := start(t, e.reopen(t, e.client, subscriber.WithMaxAttempts(1)), h)
	e.awaitParked(t, "key-0", 3)
	stopFirst()

	fixed.Store(true)
	ctx, cancel := context.WithCancel(testContext(t))
	released := make(chan error, 1)
	go func() { released <- e.sub.Release(ctx, "key-0") }()
	asked := e.awaitRequested(t, "key-0")
	cancel()
	require.ErrorIs(t, await(t, released), context.Canceled)
	k := e.awaitRequested(t, "key-0")
	assert.Equal(t, asked.ReleaseRequested, k.ReleaseRequested, "the request stays")
	assert.Equal(t, 3, k.Messages)
	assert.False(t, k.Releasing)
	assert.Equal(t, 1, tr.processed("key-0"))

	later := e.reopen(t, e.client, subscriber.WithMaxAttempts(1))
	stop := start(t, later, h)
	awaitDone(t, tr, "key-0")
	ctx = testContext(t)
	require.NoError(t, e.srv.WaitFor(ctx, func() bool {
		list, err := e.sub.Parked(ctx)
		return err == nil && len(list) == 0
	}), "the key was never unparked: %s", e.describe())
	stop()
	tr.verify(t)
	assert.Equal(t, int64(3), later.Stats().Released)
}

// TestReleaseRequestRunsOnce: two processes receive the subscription when
// a release is requested. Both see the request; the claim's
// compare-and-set picks one, and every parked message runs once, in
// order.
func TestReleaseRequestRunsOnce(t *testing.T) {
	t.Parallel()
	e := newParkEnv(t, nil, subscriber.WithMaxAttempts(1))
	a := e.reopen(t, harness.Client(t, e.srv.Addr), subscriber.WithMaxAttempts(1))
	b := e.reopen(t, harness.Client(t, e.srv.Addr), subscriber.WithMaxAttempts(1))
	tr := newTracker(nil, 0)
	tr.expect("key-0", 6)
	var fixed atomic.Bool
	h := tr.handler(func(_ context.Context, d *subscriber.Delivery) error {
		if string(d.Data) == "key-0/2" && !fixed.Load() {
			return errInjected
		}
		return nil
	})
	stopA, stopB := start(t, a, h), start(t, b, h)
	e.publishSeqs(t, "key-0", 1, 6)
	e.awaitParked(t, "key-0", 5)

	fixed.Store(true)
	require.NoError(t, e.sub.RequestRelease(testContext(t), "key-0"))
	awaitDone(t, tr, "key-0")
	stopA()
	stopB()
	tr.verify(t)
	ra, rb := a.Stats().Released, b.Stats().Released
	assert.Equal(t, int64(5), ra+rb)
	assert.True(t, ra == 0 || rb == 0, "one Receive released the key: %d and %d", ra, rb)
}

// TestReleaseOfAKeyNotParked: Release and RequestRelease of a key that is
// not parked return ErrNotParked at once, where no Receive runs, and
// record nothing.
func TestReleaseOfAKeyNotParked(t *testing.T) {
	t.Parallel()
	e := newParkEnv(t, nil)
	ctx := testContext(t)
	require.ErrorIs(t, e.sub.Release(ctx, "key-0"), subscriber.ErrNotParked)
	require.ErrorIs(t, e.sub.RequestRelease(ctx, "key-0"), subscriber.ErrNotParked)
	require.NoError(t, ctx.Err(), "neither waited")
	_, subID := splitName(e.sub.Name())
	for _, m := range e.srv.Messages(path(e.client, "topics", subID+"-parking-control")) {
		assert.NotContains(t, string(m.Data), "release-request")
	}
}

package subscriber_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/keyorder/keyorder/ordering/orderingtest"
	"github.com/keyorder/keyorder/subscriber"
)

// TestShutdownDrains checks S7: when Receive's ctx ends, the deliveries
// queued behind a running handler do not run; the running handler
// finishes with a live context and its message is acked; and only then
// does Receive return, once the queued deliveries are nacked. That nothing
// is left leased is TestShutdownLeavesNoLease's.
func TestShutdownDrains(t *testing.T) {
	t.Parallel()
	e := newFakeEnv(t, nil, subscriber.WithWorkers(1))
	e.publish(t, keyNames(1), 10)

	running, release := make(chan struct{}), make(chan struct{})
	var calls atomic.Int32
	var ctxErr atomic.Value
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		done <- e.sub.Receive(ctx, func(hctx context.Context, d *subscriber.Delivery) error {
			if calls.Add(1) == 1 {
				close(running)
				<-release
				ctxErr.Store(fmtErr(hctx.Err()))
			}
			return nil
		})
	}()
	<-running
	e.waitStats(t, "the whole backlog is with the client", func(st orderingtest.Stats) bool { return st.Outstanding == 10 })
	cancel()
	select {
	case err := <-done:
		t.Fatalf("Receive returned (%v) while a handler was running", err)
	case <-time.After(50 * time.Millisecond):
		// Receive waits for the handler: a negative check, bounded.
	}
	close(release)
	require.NoError(t, <-done)

	assert.Equal(t, int32(1), calls.Load(), "queued deliveries did not run")
	assert.Equal(t, "<nil>", ctxErr.Load(), "the running handler's context stayed live")
	st := e.srv.Stats(e.sub.Name())
	assert.Equal(t, 1, st.Acked, "the running handler's message was acked")
	assert.NotZero(t, st.Nacked, "the queued deliveries were nacked")
}

// TestShutdownDrainTimeout checks that a handler still running at the drain
// timeout has its context cancelled, that Receive waits for it, and that
// its message is nacked, not acked.
func TestShutdownDrainTimeout(t *testing.T) {
	t.Parallel()
	e := newFakeEnv(t, nil, subscriber.WithDrainTimeout(50*time.Millisecond), subscriber.WithMaxAttempts(3))
	e.publish(t, keyNames(1), 1)

	running := make(chan struct{})
	var sawCancel atomic.Bool
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		done <- e.sub.Receive(ctx, func(hctx context.Context, d *subscriber.Delivery) error {
			close(running)
			<-hctx.Done()
			sawCancel.Store(errors.Is(hctx.Err(), context.Canceled))
			return hctx.Err()
		})
	}()
	<-running
	cancel()
	require.NoError(t, <-done)
	assert.True(t, sawCancel.Load())
	st := e.srv.Stats(e.sub.Name())
	assert.Equal(t, 1, st.Nacked, "nacked once, after the streams closed")
	assert.Zero(t, st.Acked)
}

// TestShutdownCutsRetryBackoff checks that a delivery waiting to be retried
// does not hold up shutdown: it is nacked at once.
func TestShutdownCutsRetryBackoff(t *testing.T) {
	t.Parallel()
	e := newFakeEnv(t, nil, subscriber.WithBackoff(time.Hour, time.Hour), subscriber.WithMaxAttempts(3))
	e.publish(t, keyNames(1), 1)

	failed := make(chan struct{})
	var calls atomic.Int32
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		done <- e.sub.Receive(ctx, func(context.Context, *subscriber.Delivery) error {
			if calls.Add(1) == 1 {
				close(failed)
			}
			return errInjected
		})
	}()
	<-failed
	cancel()
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(testTimeout):
		t.Fatal("Receive waited for the retry backoff")
	}
	st := e.srv.Stats(e.sub.Name())
	assert.Equal(t, 1, st.Nacked, "nacked once, after the streams closed")
	assert.Zero(t, st.Acked)
	assert.Equal(t, int32(1), calls.Load(), "the handler ran once: the retry was cut")
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

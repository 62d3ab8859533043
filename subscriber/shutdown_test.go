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

// waitStats waits until cond holds of e's subscription stats.
func (e fakeEnv) waitStats(t *testing.T, what string, cond func(orderingtest.Stats) bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	require.NoError(t, e.srv.WaitFor(ctx, func() bool { return cond(e.srv.Stats(e.sub.Name())) }), "%s; stats %+v", what, e.srv.Stats(e.sub.Name()))
}

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

func fmtErr(err error) string {
	if err == nil {
		return "<nil>"
	}
	return err.Error()
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

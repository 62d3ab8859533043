package engine

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"cloud.google.com/go/pubsub/v2"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// newPushDoor makes the push door of an engine of an ordered subscription
// that runs h, with parking if parks.
func newPushDoor(t *testing.T, parks bool, drain time.Duration, h Handler) (*PushDoor, *Counters) {
	t.Helper()
	counts := &Counters{}
	cfg := &Config{
		Workers: 1, Partitions: 1, MaxAttempts: 3, MinBackoff: time.Millisecond, MaxBackoff: time.Millisecond,
		DrainTimeout: drain, DedupWindow: 16, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	}
	r, err := New(t.Context(), cfg, Facts{Name: "projects/p/subscriptions/s", Ordered: true, Parks: parks, Counts: counts}, h)
	require.NoError(t, err)
	return r.PushDoor(), counts
}

// pushed is a pushed message of key k.
func pushed(id, key string) *pubsub.Message {
	return &pubsub.Message{ID: id, OrderingKey: key, Data: []byte(id)}
}

// TestPushDoorHoldsARetryAfter: Call calls again, within the request,
// after each delay the handler asks for while the waits fit in hold, and
// answers what the last call made of the message, counted once.
func TestPushDoorHoldsARetryAfter(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		hold  time.Duration
		calls int64
		out   Outcome
	}{
		{"within the hold", time.Minute, 3, Acked},
		{"past the hold", 0, 1, Retried},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var calls atomic.Int64
			d, counts := newPushDoor(t, false, time.Second, func(context.Context, *Delivery) error {
				if calls.Add(1) < 3 {
					return &RetryAfterError{Delay: time.Millisecond, Err: errors.New("not yet")}
				}
				return nil
			})
			j := d.Arrive(t.Context(), pushed("m1", "k"))
			acked, err := d.Call(t.Context(), j, tc.hold, nil)
			require.NoError(t, err)
			assert.Equal(t, tc.out == Acked, acked, "acked")
			assert.Equal(t, tc.calls, calls.Load(), "calls")
			assert.Equal(t, int64(1), counts.Received.Load(), "received")
			assert.Equal(t, int64(1), counts.Settled[tc.out].Load(), "settled %v", tc.out)
			assert.Equal(t, tc.out == Acked, d.r.Idle(), "the lane goes with a success, and keeps a failure's record")
		})
	}
}

// TestPushDoorParks: a message that fails for good on a subscription with
// parking calls park with its error; it is settled Parked if park moved
// it, and nacked as Failed otherwise, for the service to push it again.
func TestPushDoorParks(t *testing.T) {
	t.Parallel()
	for _, moved := range []bool{true, false} {
		t.Run(map[bool]string{true: "moved", false: "not moved"}[moved], func(t *testing.T) {
			t.Parallel()
			failure := &PermanentError{Err: errors.New("bad")}
			d, counts := newPushDoor(t, true, time.Second, func(context.Context, *Delivery) error { return failure })
			j := d.Arrive(t.Context(), pushed("m1", "k"))
			var got error
			acked, err := d.Call(t.Context(), j, time.Minute, func(err error) bool {
				got = err
				return moved
			})
			require.NoError(t, err)
			assert.ErrorIs(t, got, failure, "park hears the handler's error")
			want, parked := Failed, int64(0)
			if moved {
				want, parked = Parked, 1
			}
			assert.Equal(t, moved, acked, "acked")
			assert.Equal(t, int64(1), counts.Settled[want].Load(), "settled %v", want)
			assert.Equal(t, parked, counts.Parked.Load(), "parked")
		})
	}
}

// TestPushDoorStop: Stop closes Stopping, waits for drain until the drain
// timeout, then cancels the handlers before cancel, and calls closed once
// drain has ended.
func TestPushDoorStop(t *testing.T) {
	t.Parallel()
	d, _ := newPushDoor(t, false, 10*time.Millisecond, func(context.Context, *Delivery) error { return nil })
	r := d.r
	var steps []string
	canceled := make(chan struct{})
	d.Stop(t.Context(), func() {
		<-r.Stopping() // closed before the drain starts
		<-canceled
		steps = append(steps, "drained")
	}, func() {
		assert.Error(t, r.handlerCtx.Err(), "the handlers' context is cancelled first")
		steps = append(steps, "cancel")
		close(canceled)
	}, func() {
		steps = append(steps, "closed")
	})
	assert.Equal(t, []string{"cancel", "drained", "closed"}, steps)
	assert.True(t, r.Stopped())
	acked, err := d.Call(t.Context(), d.Arrive(t.Context(), pushed("m2", "k")), time.Minute, nil)
	assert.False(t, acked)
	assert.ErrorIs(t, err, errStopped, "nothing runs once stopped")
}

package subscriber_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/keyorder/keyorder/subscriber"
)

var errWaiting = errors.New("a gap's missing number may still come")

// TestPushWaitIsNotDeadLettered: on push with a dead-letter policy of 5
// deliveries and no parking, a message whose handler asks to wait
// (RetryAfter, as the inbox does during a gap's wait) is not answered 500
// again and again until the service forwards it: its delay is kept within
// the request, and on the delivery the policy would forward it is held
// until it runs. Either way it runs, and its key's next message after it;
// nothing is dead-lettered.
func TestPushWaitIsNotDeadLettered(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		// wait tells whether the call of k/1 at delivery attempt a, the
		// first call of k/1 made at first, asks to wait, or fails.
		wait func(a int, first time.Time) error
	}{
		{"waits a second and a half at 100 ms a time", func(_ int, first time.Time) error {
			if time.Since(first) < 1500*time.Millisecond {
				return subscriber.RetryAfter(100*time.Millisecond, errWaiting)
			}
			return nil
		}},
		{"fails until the last delivery, then waits", func(a int, first time.Time) error {
			if a < 5 {
				return errInjected
			}
			if time.Since(first) < 500*time.Millisecond {
				return subscriber.RetryAfter(50*time.Millisecond, errWaiting)
			}
			return nil
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var (
				mu    sync.Mutex
				first time.Time
				ran   []string
			)
			done := make(chan struct{})
			topic, _ := names()
			dlq := "dead-" + topic
			e := newPushEnv(t, func(_ context.Context, d *subscriber.Delivery) error {
				mu.Lock()
				defer mu.Unlock()
				if string(d.Data) == "k/1" {
					if first.IsZero() {
						first = time.Now()
					}
					if err := tc.wait(d.DeliveryAttempt, first); err != nil {
						return err
					}
				}
				ran = append(ran, string(d.Data))
				if len(ran) == 2 {
					close(done)
				}
				return nil
			}, subscriber.WithDeadLetterPolicy(dlq, 5))
			e.publish(t, []string{"k"}, 2)
			select {
			case <-done:
			case <-time.After(testTimeout):
				t.Fatalf("ran %v; %+v; server %+v", ran, e.sub.Stats(), e.srv.Stats(e.sub.Name()))
			}
			mu.Lock()
			defer mu.Unlock()
			assert.Equal(t, []string{"k/1", "k/2"}, ran)
			assert.Empty(t, e.srv.Messages(path(e.client, "topics", dlq)), "nothing was dead-lettered")
			require.Zero(t, e.sub.Stats().DeadLettered)
		})
	}
}

package subscriber_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"cloud.google.com/go/pubsub/v2"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/keyorder/keyorder/ordering"
	"github.com/keyorder/keyorder/subscriber"
)

// TestRetryHoldsNoWorker checks S5 with one worker: while key-0's failed
// message waits a second for its retry, every other key runs. A retry that
// slept on its worker would keep them all waiting.
func TestRetryHoldsNoWorker(t *testing.T) {
	t.Parallel()
	keys := keyNames(20)
	const perKey = 5
	e := newFakeEnv(t, nil, subscriber.WithWorkers(1), subscriber.WithBackoff(time.Second, time.Second))
	e.publish(t, keys, perKey)
	tr := newTracker(keys, perKey)
	var othersAtRetry atomic.Int64
	othersAtRetry.Store(-1)
	tr.receive(t, e.sub, tr.handler(func(_ context.Context, d *subscriber.Delivery) error {
		if string(d.Data) == "key-0/1" {
			if d.Attempt == 1 {
				return errInjected
			}
			othersAtRetry.Store(int64(tr.processedExcept("key-0")))
		}
		return nil
	}))
	assert.Equal(t, int64((len(keys)-1)*perKey), othersAtRetry.Load(), "messages of other keys processed when key-0/1 was retried")
	assert.Equal(t, 2, tr.callsOf("key-0/1"))
	assert.Zero(t, e.srv.Stats(e.sub.Name()).Nacked, "a retry within the attempts is not nacked")
}

// TestSlowKeyHoldsOnlyItself checks S9 with two workers: key-0's handler
// does not return until every other key has finished. A slow key that held
// its partition's goroutine, or made the official client's callbacks wait,
// would stop the keys behind it, and the test would time out.
func TestSlowKeyHoldsOnlyItself(t *testing.T) {
	t.Parallel()
	keys := keyNames(40)
	const perKey = 10
	for _, k := range keys[1:] {
		require.NotEqual(t, ordering.Partition("key-0", subscriber.DefaultPartitions), ordering.Partition(k, subscriber.DefaultPartitions),
			"%s shares key-0's partition, so it would wait for key-0 by design", k)
	}
	e := newFakeEnv(t, nil, subscriber.WithWorkers(2))
	e.publish(t, keys, perKey)
	tr := newTracker(keys, perKey)
	othersDone := func() bool { return tr.processedExcept("key-0") == (len(keys)-1)*perKey }
	var blocked atomic.Bool
	tr.receive(t, e.sub, tr.handler(func(ctx context.Context, d *subscriber.Delivery) error {
		if d.Key == "key-0" && !blocked.Swap(true) {
			wait, cancel := context.WithTimeout(ctx, testTimeout)
			defer cancel()
			return tr.await(wait, othersDone)
		}
		return nil
	}))
	assert.True(t, blocked.Load())
}

// TestKeyBacklogLeavesRoomForOthers checks S10: a stuck key with a long
// backlog must not fill the official client's flow-control window. With a
// window of 20 messages and slow's 40 published first, the service sends
// slow's messages first; kept here, they would fill the window while slow
// is stuck, and the other keys would never be delivered.
func TestKeyBacklogLeavesRoomForOthers(t *testing.T) {
	t.Parallel()
	rs := pubsub.DefaultReceiveSettings
	rs.MaxOutstandingMessages = 20
	e := newFakeEnv(t, nil, subscriber.WithWorkers(2), subscriber.WithKeyBacklog(2), subscriber.WithReceiveSettings(rs))
	e.publish(t, []string{"slow"}, 40)
	others := keyNames(10)
	e.publish(t, others, 5)
	tr := newTracker(others, 5)
	tr.expect("slow", 40)
	othersDone := func() bool { return tr.processedExcept("slow") == len(others)*5 }
	var blocked atomic.Bool
	tr.receive(t, e.sub, tr.handler(func(ctx context.Context, d *subscriber.Delivery) error {
		if d.Key == "slow" && !blocked.Swap(true) {
			wait, cancel := context.WithTimeout(ctx, testTimeout)
			defer cancel()
			return tr.await(wait, othersDone)
		}
		return nil
	}))
	st := e.sub.Stats()
	assert.Positive(t, st.NackedRoom, "slow's deliveries past its room were nacked")
	assert.Equal(t, int64(40+len(others)*5), st.Acked)
}

// TestHotKeyKeepsItsBacklog checks the other side of S10: a key with a long
// backlog that drains quickly is not nacked for room, even with the window
// full of it, since it does not keep the window from turning over.
func TestHotKeyKeepsItsBacklog(t *testing.T) {
	t.Parallel()
	rs := pubsub.DefaultReceiveSettings
	rs.MaxOutstandingMessages = 8
	e := newFakeEnv(t, nil, subscriber.WithKeyBacklog(1), subscriber.WithReceiveSettings(rs))
	keys := []string{"hot"}
	e.publish(t, keys, 200)
	tr := newTracker(keys, 200)
	tr.receive(t, e.sub, tr.handler(func(context.Context, *subscriber.Delivery) error { return nil }))
	assert.Zero(t, e.sub.Stats().NackedRoom)
}

package subscriber_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/keyorder/keyorder/subscriber"
)

// markerCount returns a function that counts the barrier markers on e's
// control topic: events addressed to one Receive, with keyorder-to.
func (e parkEnv) markerCount() func() int {
	_, subID := splitName(e.sub.Name())
	control := path(e.client, "topics", subID+"-parking-control")
	return func() int {
		n := 0
		for _, m := range e.srv.Messages(control) {
			if _, ok := m.Attributes["keyorder-to"]; ok {
				n++
			}
		}
		return n
	}
}

// TestParkingMarkersFollowNewKeys: a Receive that gets a stream of keys
// new to it keeps its view of the control log fresh with a marker every
// quarter of the parking wait, not one per key, and runs the keys without
// waiting for one; once new keys stop coming, it sends nothing.
func TestParkingMarkersFollowNewKeys(t *testing.T) {
	t.Parallel()
	const wait = 400 * time.Millisecond
	e := newParkEnv(t, nil, subscriber.WithParkingWait(wait))
	markers := e.markerCount()
	handled := make(chan string, 100)
	start(t, e.sub, func(_ context.Context, d *subscriber.Delivery) error {
		handled <- d.Key
		return nil
	})
	recv := func() {
		t.Helper()
		select {
		case <-handled:
		case <-time.After(testTimeout):
			t.Fatal("a message was not handled")
		}
	}
	e.publishSeqs(t, "warm-up", 1, 1)
	recv()

	// 40 new keys over about 4 waits: a marker each would be 40.
	began, before := time.Now(), markers()
	tick := time.NewTicker(wait / 10)
	defer tick.Stop()
	for i := 0; i < 40; i++ {
		e.publishSeqs(t, fmt.Sprintf("new-%d", i), 1, 1)
		recv()
		<-tick.C
	}
	spent := time.Since(began)
	sent := markers() - before
	most := int(spent/(wait/4)) + 2
	assert.LessOrEqual(t, sent, most, "%d markers in %v, for 40 new keys", sent, spent)
	assert.Positive(t, sent, "markers keep the view fresh")

	// Idle: once the last new key is a wait old, no marker is sent.
	idle := markers()
	select {
	case <-time.After(3 * wait): // a negative check: nothing may happen meanwhile
	case <-testContext(t).Done():
	}
	settled := markers()
	assert.LessOrEqual(t, settled-idle, 4, "markers after the last new key")
	select {
	case <-time.After(2 * wait):
	case <-testContext(t).Done():
	}
	assert.Equal(t, settled, markers(), "an idle Receive sends nothing")
}

// TestParkingWaitsBeforeItsAck: what a park moves to the parking topic is
// acked no sooner than the parking wait after the process learned of the
// park, so that the key's next message reaches another process only once
// the park is that old (internal/barrier).
func TestParkingWaitsBeforeItsAck(t *testing.T) {
	t.Parallel()
	const wait = 600 * time.Millisecond
	e := newParkEnv(t, nil, subscriber.WithParkingWait(wait), subscriber.WithMaxAttempts(1))
	e.publishSeqs(t, "k", 1, 3)
	start(t, e.sub, func(_ context.Context, d *subscriber.Delivery) error {
		if string(d.Data) == "k/1" {
			return subscriber.Permanent(errInjected)
		}
		return nil
	})
	ctx := testContext(t)
	// The park is in the Receive's view when Parked lists it.
	require.NoError(t, e.srv.WaitFor(ctx, func() bool {
		list, err := e.sub.Parked(ctx)
		return err == nil && len(list) == 1
	}))
	learned := time.Now()
	require.Zero(t, e.srv.Stats(e.sub.Name()).Acked, "nothing acked when the park is seen")
	require.NoError(t, e.srv.WaitFor(ctx, func() bool { return e.srv.Stats(e.sub.Name()).Acked == 3 }))
	acked := time.Since(learned)
	assert.GreaterOrEqual(t, acked, wait*3/4, "acked %v after the park was seen", acked)
	assert.Less(t, acked, wait+2*time.Second, "and not much later")
}

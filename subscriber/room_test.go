package subscriber_test

import (
	"context"
	"testing"
	"time"

	"cloud.google.com/go/pubsub/v2"
	"github.com/stretchr/testify/assert"

	"github.com/keyorder/keyorder/subscriber"
)

// TestHoldClearsRoomGap: a key whose later deliveries were nacked for room
// (S10), and whose failing message then fails for good, must run that
// message and then its successors in order once the service sends them
// back (S5). The room nack left a gap at a later message; the hold's tail
// nack makes the failed message the first to come back, so the gap must
// not outlive it: it would nack the messages between the two and let the
// later one run first. Seen in examples/orders -flaky, as c-07's orders 3
// to 33 running after 34 to 40.
func TestHoldClearsRoomGap(t *testing.T) {
	t.Parallel()
	rs := pubsub.DefaultReceiveSettings
	rs.MaxOutstandingMessages = 10 // room presses at 5 held here
	e := newFakeEnv(t, nil, subscriber.WithKeyBacklog(2), subscriber.WithMaxAttempts(2),
		subscriber.WithBackoff(400*time.Millisecond, 400*time.Millisecond), // the room watch sheds meanwhile
		subscriber.WithReceiveSettings(rs))
	keys := []string{"k"}
	e.publish(t, keys, 20)
	tr := newTracker(keys, 20)
	tr.receive(t, e.sub, tr.handler(func(_ context.Context, d *subscriber.Delivery) error {
		if string(d.Data) == "k/2" && d.Attempt <= 2 {
			return errInjected
		}
		return nil
	}))
	st := e.sub.Stats()
	assert.Positive(t, st.NackedRoom, "the key's deliveries past its backlog were nacked for room while it failed")
	assert.Positive(t, st.Failed, "k/2 failed for good and held the key")
}

package subscriber_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/keyorder/keyorder/subscriber"
)

// TestDeadLetteredMessageReleasesItsKey: on a subscription with a
// dead-letter policy, the last failure of a message is not a hold, since
// the service forwards the message instead of redelivering it; the key's
// later messages then run. Until then, they do not.
func TestDeadLetteredMessageReleasesItsKey(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	e, deadTopic := newDeadLetterEnv(t, nil, subscriber.WithMaxAttempts(1))
	srv, s := e.srv, e.sub
	e.publish(t, keyNames(1), 5)

	c := &calls{ch: make(chan struct{}, 1)}
	var attempts []int
	receiveWhile(t, s, c, func(_ context.Context, d *subscriber.Delivery) error {
		c.add(d)
		if string(d.Data) == "key-0/2" {
			attempts = append(attempts, d.DeliveryAttempt)
			return errInjected
		}
		return nil
	}, func(list []string) bool { return contains(list, "key-0/5") })

	assert.Equal(t, []string{"key-0/1", "key-0/2", "key-0/2", "key-0/2", "key-0/2", "key-0/2", "key-0/3", "key-0/4", "key-0/5"}, c.snapshot())
	assert.Equal(t, []int{1, 2, 3, 4, 5}, attempts)
	// The last nack reaches the service with the client's next batch of
	// nacks, and may come after key-0/5 has run.
	require.NoError(t, srv.WaitFor(ctx, func() bool { return len(srv.Messages(deadTopic)) > 0 }))
	dead := srv.Messages(deadTopic)
	require.Len(t, dead, 1)
	assert.Equal(t, "key-0/2", string(dead[0].Data))
}

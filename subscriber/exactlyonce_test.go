package subscriber_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/keyorder/keyorder/internal/harness"
	"github.com/keyorder/keyorder/ordering/orderingtest"
	"github.com/keyorder/keyorder/subscriber"
)

// TestExactlyOnceSetting checks that CreateWithTopic turns exactly-once
// delivery on when it creates the subscription, and that an existing
// subscription keeps its own setting, as with ordering (S1).
func TestExactlyOnceSetting(t *testing.T) {
	t.Parallel()
	_, client := harness.Fake(t)
	ctx := testContext(t)
	topic, subID := names()
	s, err := subscriber.CreateWithTopic(ctx, client, topic, subID, subscriber.WithExactlyOnceDelivery())
	require.NoError(t, err)
	assert.True(t, s.ExactlyOnce())

	again, err := subscriber.CreateWithTopic(ctx, client, topic, subID)
	require.NoError(t, err)
	assert.True(t, again.ExactlyOnce(), "an existing subscription keeps its setting")

	_, plainID := names()
	plain, err := subscriber.CreateWithTopic(ctx, client, topic, plainID)
	require.NoError(t, err)
	assert.False(t, plain.ExactlyOnce())
}

// TestExactlyOnceFailedAckRunsAgain: on an exactly-once subscription, the
// service refuses the ack of k/2, whose lease then runs out and which comes
// back. A refused ack means the message was not processed, so its handler
// runs again, where the S6 window would otherwise skip it.
func TestExactlyOnceFailedAckRunsAgain(t *testing.T) {
	t.Parallel()
	srv, client := harness.Fake(t, orderingtest.WithAckDeadline(300*time.Millisecond))
	topic, subID := names()
	s, err := subscriber.CreateWithTopic(testContext(t), client, topic, subID, subscriber.WithExactlyOnceDelivery())
	require.NoError(t, err)
	e := fakeEnv{srv: srv, client: client, topic: s.Topic(), sub: s}
	e.publish(t, []string{"k"}, 3)
	refused := srv.FailAcks(orderingtest.Data("k/2"), orderingtest.PermanentAckFailure, 1)

	var (
		mu    sync.Mutex
		calls []string
	)
	ranTwice := make(chan struct{})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		done <- s.Receive(ctx, func(_ context.Context, d *subscriber.Delivery) error {
			mu.Lock()
			defer mu.Unlock()
			calls = append(calls, string(d.Data))
			if n := countOf(calls, "k/2"); n == 2 {
				close(ranTwice)
			}
			return nil
		})
	}()
	select {
	case <-ranTwice:
	case <-time.After(testTimeout):
		t.Fatal("k/2 did not run again after its ack was refused")
	}
	require.NoError(t, e.srv.WaitFor(testContext(t), func() bool { return e.srv.Stats(s.Name()).Outstanding == 0 }))
	cancel()
	require.NoError(t, <-done)

	assert.Equal(t, 1, refused.Hits())
	// The official client reports every ack of the request that carried
	// the refused one as failed, though the service applied the others.
	assert.GreaterOrEqual(t, s.Stats().AckFailed, int64(1))
	mu.Lock()
	defer mu.Unlock()
	assert.Equal(t, 1, countOf(calls, "k/1"))
	assert.Equal(t, 1, countOf(calls, "k/3"), "k/3's ack was final: the service does not send it again")
}

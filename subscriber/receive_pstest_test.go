package subscriber_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/keyorder/keyorder/internal/harness"
	"github.com/keyorder/keyorder/ordering"
	"github.com/keyorder/keyorder/publisher"
	"github.com/keyorder/keyorder/subscriber"
)

// TestReceiveHappyPath runs publish and receive end to end on pstest:
// headers carry the key (S2), each key's messages run in order, each
// message once, and every message is acked after its handler (S4).
func TestReceiveHappyPath(t *testing.T) {
	t.Parallel()
	srv, client := harness.Pstest(t)
	ctx := testContext(t)
	topic, subID := names()
	sub, err := subscriber.CreateWithTopic(ctx, client, topic, subID, subscriber.WithWorkers(4))
	require.NoError(t, err)

	const keys, perKey = 5, 8
	p, err := publisher.New(client, topic)
	require.NoError(t, err)
	for i := 0; i < perKey; i++ {
		for k := 0; k < keys; k++ {
			_, err := p.Publish(ctx, &publisher.Message{
				Data:    []byte(fmt.Sprint(i)),
				Headers: map[string]string{ordering.Header: fmt.Sprintf("k%d", k), "n": fmt.Sprint(i)},
			}).Get(ctx)
			require.NoError(t, err)
		}
	}
	_, err = p.Publish(ctx, &publisher.Message{Data: []byte("unordered")}).Get(ctx)
	require.NoError(t, err)
	require.NoError(t, p.Close(ctx))

	var (
		mu      sync.Mutex
		got     = map[string][]string{}
		handled = map[string]bool{}
		total   int
	)
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	err = sub.Receive(rctx, func(_ context.Context, d *subscriber.Delivery) error {
		mu.Lock()
		defer mu.Unlock()
		assert.Equal(t, d.Key, d.Headers[ordering.Header], "S2")
		if d.Key != "" {
			assert.Equal(t, string(d.Data), d.Headers["n"])
		}
		assert.False(t, handled[d.ID], "handled twice: %s", d.ID)
		assert.Equal(t, 1, d.Attempt)
		assert.WithinDuration(t, time.Now(), d.PublishTime, time.Minute)
		handled[d.ID] = true
		got[d.Key] = append(got[d.Key], string(d.Data))
		if total++; total == keys*perKey+1 {
			cancel()
		}
		return nil
	})
	require.NoError(t, err)

	for k := 0; k < keys; k++ {
		want := make([]string, perKey)
		for i := range want {
			want[i] = fmt.Sprint(i)
		}
		assert.Equal(t, want, got[fmt.Sprintf("k%d", k)], "key k%d in order", k)
	}
	assert.Equal(t, []string{"unordered"}, got[""])
	// Receive returns after the official client has sent its acks.
	for _, m := range srv.Messages() {
		assert.GreaterOrEqual(t, m.Acks, 1, "message %s acked", m.ID)
	}
}

func TestReceiveOnlyOnceAtATime(t *testing.T) {
	t.Parallel()
	_, client := harness.Pstest(t)
	ctx := testContext(t)
	topic, subID := names()
	sub, err := subscriber.CreateWithTopic(ctx, client, topic, subID)
	require.NoError(t, err)
	p, err := publisher.New(client, topic)
	require.NoError(t, err)
	_, err = p.Publish(ctx, &publisher.Message{Data: []byte("x")}).Get(ctx)
	require.NoError(t, err)
	require.NoError(t, p.Close(ctx))

	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	running := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- sub.Receive(rctx, func(context.Context, *subscriber.Delivery) error {
			close(running)
			return nil
		})
	}()
	select {
	case <-running:
	case <-ctx.Done():
		t.Fatal("the first Receive never delivered")
	}
	require.ErrorIs(t, sub.Receive(ctx, func(context.Context, *subscriber.Delivery) error { return nil }), subscriber.ErrReceiving)
	cancel()
	require.NoError(t, <-done)

	// Once the first has returned, Receive runs again.
	rctx, cancel = context.WithTimeout(ctx, 10*time.Millisecond)
	defer cancel()
	require.NoError(t, sub.Receive(rctx, func(context.Context, *subscriber.Delivery) error { return nil }))
}

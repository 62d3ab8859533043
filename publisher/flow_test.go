package publisher_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"cloud.google.com/go/pubsub/v2"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/keyorder/keyorder/publisher"
)

// TestFlowControl checks that keyorder's flow control refuses or delays a
// message without touching its key: the messages already in flight on the
// key still succeed, and so do the next ones.
func TestFlowControl(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		fc       pubsub.FlowControlSettings
		wantErr  error
		blocking bool
	}{
		{"block on messages", pubsub.FlowControlSettings{MaxOutstandingMessages: 2, LimitExceededBehavior: pubsub.FlowControlBlock}, context.DeadlineExceeded, true},
		{"block on bytes", pubsub.FlowControlSettings{MaxOutstandingMessages: 100, MaxOutstandingBytes: 40, LimitExceededBehavior: pubsub.FlowControlBlock}, context.DeadlineExceeded, true},
		{"signal on messages", pubsub.FlowControlSettings{MaxOutstandingMessages: 2, LimitExceededBehavior: pubsub.FlowControlSignalError}, pubsub.ErrFlowControllerMaxOutstandingMessages, false},
		{"signal on bytes", pubsub.FlowControlSettings{MaxOutstandingMessages: 100, MaxOutstandingBytes: 40, LimitExceededBehavior: pubsub.FlowControlSignalError}, pubsub.ErrFlowControllerMaxOutstandingBytes, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e, held, release := newHoldingEnv(t, 4)
			ctx := testContext(t)
			s := settings(1)
			s.FlowControlSettings = tc.fc
			p := e.newPublisher(t, publisher.WithPublishSettings(s))
			pub := func(ctx context.Context, i int) *publisher.Result {
				// 17 bytes encoded: two fit in 40 bytes, three do not.
				return p.Publish(ctx, &publisher.Message{Data: []byte(fmt.Sprintf("message-%04d", i))}, publisher.WithOrderingKey("k"))
			}

			first, second := pub(ctx, 0), pub(ctx, 1)
			<-held // the first RPC is at the server; both messages are outstanding
			// Blocking waits for room until its context ends. SignalError
			// must not wait at all: it gets the test's whole context, and
			// room only comes after the call, so a wait would end in the
			// context's error rather than the flow control error.
			pubCtx := ctx
			if tc.blocking {
				short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
				defer cancel()
				pubCtx = short
			}
			_, err := pub(pubCtx, 2).Get(ctx)
			require.ErrorIs(t, err, tc.wantErr)

			release.open()
			for _, r := range []*publisher.Result{first, second} {
				_, err := r.Get(ctx)
				require.NoError(t, err)
			}
			// An ordered result is ready only after its room is released.
			_, err = pub(ctx, 3).Get(ctx)
			require.NoError(t, err)
			assert.Equal(t, []string{"message-0000", "message-0001", "message-0003"}, e.storedData("k"))
		})
	}
}

// TestFlowControlUnordered checks that unordered messages release their
// room when done, so that a steady stream never stalls.
func TestFlowControlUnordered(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := testContext(t)
	s := settings(1)
	s.FlowControlSettings = pubsub.FlowControlSettings{MaxOutstandingMessages: 3, LimitExceededBehavior: pubsub.FlowControlBlock}
	p := e.newPublisher(t, publisher.WithPublishSettings(s))
	for i := 0; i < 50; i++ {
		_, err := p.Publish(ctx, &publisher.Message{Data: []byte("x")}).Get(ctx)
		require.NoError(t, err)
	}
	assert.Len(t, e.stored(), 50)
}

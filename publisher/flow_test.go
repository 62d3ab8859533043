package publisher_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"cloud.google.com/go/pubsub/v2"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/keyorder/keyorder/internal/harness"
	"github.com/keyorder/keyorder/ordering/orderingtest"
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
			// Without stamps, which would add to each message's size.
			p := e.newPublisher(t, publisher.WithPublishSettings(s), publisher.WithoutStamps())
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

// TestFlowControlReleasesEachMessage checks P8 (issue 7): a message that
// the server holds keeps only its own room. With room for 5 messages, one
// held and four done, a message of any key, and an unordered one, must
// still fit. Before the fix, unordered messages released their room in
// publish order, so the held one kept the room of the four done after it.
func TestFlowControlReleasesEachMessage(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		heldKey  string // key of the held message and of the four done after it
		behavior pubsub.LimitExceededBehavior
	}{
		{"unordered held, signal error", "", pubsub.FlowControlSignalError},
		{"unordered held, block", "", pubsub.FlowControlBlock},
		{"keyed held, signal error", "slow", pubsub.FlowControlSignalError},
		{"keyed held, block", "slow", pubsub.FlowControlBlock},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			srv, client := harness.Fake(t)
			topic := newTopic(t, client)
			ctx := testContext(t)
			s := settings(1)
			s.FlowControlSettings = pubsub.FlowControlSettings{MaxOutstandingMessages: 5, LimitExceededBehavior: tc.behavior}
			p, err := publisher.New(client, topic, publisher.WithPublishSettings(s))
			require.NoError(t, err)
			hold := srv.HoldPublish(orderingtest.Data("held"))
			t.Cleanup(func() {
				hold.Remove() // before Close, which waits for the held message
				closeCtx, cancel := context.WithTimeout(context.Background(), testTimeout)
				defer cancel()
				require.NoError(t, p.Close(closeCtx))
			})

			held := p.Publish(ctx, &publisher.Message{Data: []byte("held")}, publisher.WithOrderingKey(tc.heldKey))
			require.NoError(t, hold.Wait(ctx, 1))
			for i := 0; i < 4; i++ {
				// Other keys when the held message has one: its own key
				// would wait behind it (P3).
				key := tc.heldKey
				if key != "" {
					key = fmt.Sprintf("other-%d", i)
				}
				_, err := p.Publish(ctx, &publisher.Message{Data: []byte(fmt.Sprint("done-", i))}, publisher.WithOrderingKey(key)).Get(ctx)
				require.NoError(t, err, "message %d", i)
			}

			// One message is outstanding: there is room for four more.
			// Blocking would wait for room until the deadline, which is
			// short so that a failure shows quickly.
			pubCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
			defer cancel()
			var more []*publisher.Result
			for _, key := range []string{"", "next", "", "next"} {
				more = append(more, p.Publish(pubCtx, &publisher.Message{Data: []byte("more")}, publisher.WithOrderingKey(key)))
			}
			for i, r := range more {
				_, err := r.Get(ctx)
				require.NoError(t, err, "message %d after the done ones", i)
			}
			require.False(t, isReady(held), "the held message is still outstanding")

			hold.Remove()
			_, err = held.Get(ctx)
			require.NoError(t, err)
		})
	}
}

// TestFlowControlWaiterWakes checks P8 for a Publish already waiting for
// room when an unordered message finishes behind an older one that the
// server still holds: the room is released then, and the wait ends.
func TestFlowControlWaiterWakes(t *testing.T) {
	t.Parallel()
	srv, client := harness.Fake(t)
	topic := newTopic(t, client)
	ctx := testContext(t)
	s := settings(1)
	s.FlowControlSettings = pubsub.FlowControlSettings{MaxOutstandingMessages: 2, LimitExceededBehavior: pubsub.FlowControlBlock}
	p, err := publisher.New(client, topic, publisher.WithPublishSettings(s))
	require.NoError(t, err)
	waiting := make(chan struct{}, 1)
	publisher.OnFlowWait(p, func() { waiting <- struct{}{} })
	first, second := srv.HoldPublish(orderingtest.Data("first")), srv.HoldPublish(orderingtest.Data("second"))
	t.Cleanup(func() {
		first.Remove()
		second.Remove()
		closeCtx, cancel := context.WithTimeout(context.Background(), testTimeout)
		defer cancel()
		require.NoError(t, p.Close(closeCtx))
	})

	held := p.Publish(ctx, &publisher.Message{Data: []byte("first")})
	done := p.Publish(ctx, &publisher.Message{Data: []byte("second")})
	require.NoError(t, second.Wait(ctx, 1))
	third := make(chan *publisher.Result, 1)
	go func() { third <- p.Publish(ctx, &publisher.Message{Data: []byte("third")}) }()
	select {
	case <-waiting: // both messages are outstanding: the third waits
	case <-ctx.Done():
		t.Fatal("the third Publish never waited for room")
	}

	second.Remove()
	_, err = done.Get(ctx)
	require.NoError(t, err)
	select {
	case r := <-third:
		_, err := r.Get(ctx)
		require.NoError(t, err)
	case <-ctx.Done():
		t.Fatal("the third Publish still waits, though only one message is outstanding")
	}
	require.False(t, isReady(held))
}

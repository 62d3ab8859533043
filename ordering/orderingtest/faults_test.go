package orderingtest_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"cloud.google.com/go/pubsub/v2"
	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/keyorder/keyorder/ordering/orderingtest"
)

// TestFailPublish: an injected failure reaches the official publisher with
// its code and stores nothing. A permanent code fails the key, which pauses
// it; a transient one is retried by the client and succeeds.
func TestFailPublish(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name      string
		code      codes.Code
		permanent bool
	}{
		{name: "permanent", code: codes.PermissionDenied, permanent: true},
		{name: "transient", code: codes.Unavailable},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t, nil)
			fault := f.srv.FailPublish(orderingtest.Key("k"), tc.code, 1)
			p := f.client.Publisher(f.topic)
			defer p.Stop()
			p.EnableMessageOrdering = true

			_, err := p.Publish(f.ctx, &pubsub.Message{Data: []byte("k/1"), OrderingKey: "k"}).Get(f.ctx)
			assert.Equal(t, 1, fault.Hits())
			if !tc.permanent {
				require.NoError(t, err)
				assert.Len(t, f.srv.Messages(f.topic), 1, "stored once, by the retry")
				return
			}
			assert.Equal(t, tc.code, status.Code(err))
			assert.Empty(t, f.srv.Messages(f.topic))
			_, err = p.Publish(f.ctx, &pubsub.Message{Data: []byte("k/2"), OrderingKey: "k"}).Get(f.ctx)
			assert.True(t, errors.As(err, new(pubsub.ErrPublishingPaused)), "the client paused the key: %v", err)
			p.ResumePublish("k")
			_, err = p.Publish(f.ctx, &pubsub.Message{Data: []byte("k/3"), OrderingKey: "k"}).Get(f.ctx)
			require.NoError(t, err, "the fault fired once only")
			assert.Len(t, f.srv.Messages(f.topic), 1)
		})
	}
}

// TestHoldPublish: a held request completes only once the hold is removed;
// other keys are not held.
func TestHoldPublish(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	hold := f.srv.HoldPublish(orderingtest.Key("k"))
	p := f.client.Publisher(f.topic)
	defer p.Stop()
	p.EnableMessageOrdering = true

	held := p.Publish(f.ctx, &pubsub.Message{Data: []byte("k/1"), OrderingKey: "k"})
	require.NoError(t, hold.Wait(f.ctx, 1))
	_, err := p.Publish(f.ctx, &pubsub.Message{Data: []byte("j/1"), OrderingKey: "j"}).Get(f.ctx)
	require.NoError(t, err)
	select {
	case <-held.Ready():
		t.Fatal("the held publish completed")
	default:
	}
	require.Len(t, f.srv.Messages(f.topic), 1)

	hold.Remove()
	_, err = held.Get(f.ctx)
	require.NoError(t, err)
	assert.Len(t, f.srv.Messages(f.topic), 2)
}

// TestDropAcks: an ack that does not persist makes the message, and its
// key's acknowledged tail, come back when the lease runs out.
func TestDropAcks(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil, orderingtest.WithAckDeadline(500*time.Millisecond))
	fault := f.srv.DropAcks(orderingtest.Data("k/1"), 1)
	f.publish(f.topic, []string{"k"}, 0, 2)
	h := f.recordAndAck(f.sub, nil)
	f.waitFor("the redelivered tail acked", func() bool { return f.srv.Stats(f.sub).Acked == 3 })
	assert.Equal(t, []int{1, 2, 1, 2}, h.of("k"))
	assert.Equal(t, 1, fault.Hits())
	assert.Equal(t, 1, f.srv.Stats(f.sub).Expired)
	f.checkDeliveryLog(f.sub)
}

// TestDuplicateDeliveries: a duplicated message comes twice in a row; the
// key's order is otherwise kept.
func TestDuplicateDeliveries(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	fault := f.srv.DuplicateDeliveries(orderingtest.Data("k/2"), 1)
	f.publish(f.topic, []string{"k"}, 0, 3)
	h := f.recordAndAck(f.sub, nil)
	f.waitFor("four handled", func() bool { return h.n.Load() == 4 })
	f.waitFor("three acked", func() bool { return f.srv.Stats(f.sub).Acked == 3 })
	assert.Equal(t, []int{1, 2, 2, 3}, h.of("k"))
	assert.Equal(t, 1, fault.Hits())
	log := f.checkDeliveryLog(f.sub)
	require.Len(t, log, 4)
	assert.True(t, log[2].Duplicate)
	assert.Equal(t, log[1].MessageID, log[2].MessageID)
	assert.Equal(t, 1, f.srv.Stats(f.sub).Duplicated)
}

// TestRedeliverKey forces the service's tail redelivery: the key's
// messages from its oldest unacknowledged one come again, acknowledged
// ones included.
func TestRedeliverKey(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	f.publish(f.topic, []string{"k"}, 0, 3)
	var stale atomic.Pointer[pubsub.Message]
	var h handled
	f.receive(f.sub, nil, func(_ context.Context, m *pubsub.Message) {
		key, seq := parse(t, m.Data)
		h.add(key, seq)
		if seq == 1 && stale.CompareAndSwap(nil, m) {
			return // left outstanding
		}
		m.Ack()
	})
	f.waitFor("2 and 3 acked", func() bool { return f.srv.Stats(f.sub).Acked == 2 })
	n, err := f.srv.RedeliverKey(f.sub, "k")
	require.NoError(t, err)
	assert.Equal(t, 3, n)
	f.waitFor("the tail acked again", func() bool { return f.srv.Stats(f.sub).Acked == 5 })
	stale.Load().Ack()
	assert.Equal(t, []int{1, 2, 3, 1, 2, 3}, h.of("k"))
	f.checkDeliveryLog(f.sub)
}

func TestRedeliverKeyErrors(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	f.createSubscription(&pubsubpb.Subscription{Name: subName("unordered"), Topic: f.topic})
	for _, tc := range []struct {
		name, sub, key string
		err            error
	}{
		{"no such subscription", subName("nope"), "k", orderingtest.ErrNoSubscription},
		{"unordered subscription", subName("unordered"), "k", orderingtest.ErrUnordered},
		{"key with nothing delivered", f.sub, "k", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n, err := f.srv.RedeliverKey(tc.sub, tc.key)
			assert.ErrorIs(t, err, tc.err)
			assert.Zero(t, n)
		})
	}
}

// TestBreakStreams: the client reconnects after its stream is broken and
// goes on receiving.
func TestBreakStreams(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	h := f.recordAndAck(f.sub, &pubsub.ReceiveSettings{NumGoroutines: 2})
	f.waitFor("two streams", func() bool { return f.srv.Stats(f.sub).Streams == 2 })
	f.publish(f.topic, []string{"k"}, 0, 5)
	f.waitFor("five acked", func() bool { return f.srv.Stats(f.sub).Acked == 5 })

	f.breakStreams(f.sub, 2)
	f.publish(f.topic, []string{"k"}, 5, 5)
	f.waitFor("ten acked", func() bool { return f.srv.Stats(f.sub).Acked == 10 })
	assert.Equal(t, []int{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, h.of("k"))
	for _, d := range f.checkDeliveryLog(f.sub)[5:] {
		assert.Greater(t, d.Stream, 2, "delivered on a new stream")
	}
	assert.Zero(t, f.srv.BreakStreams(subName("nope")))
}

// TestLosePublishResponses: the messages are stored and the call fails. A
// transient code makes the official publisher retry, which stores the
// message a second time under a new ID; a permanent one leaves the caller
// with a failure for a message that was stored.
func TestLosePublishResponses(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		code   codes.Code
		stored int
	}{
		{name: "retried", code: codes.Unavailable, stored: 2},
		{name: "not retried", code: codes.PermissionDenied, stored: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t, nil)
			fault := f.srv.LosePublishResponses(orderingtest.Data("k/1"), tc.code, 1)
			p := f.client.Publisher(f.topic)
			defer p.Stop()
			p.EnableMessageOrdering = true

			id, err := p.Publish(f.ctx, &pubsub.Message{Data: []byte("k/1"), OrderingKey: "k"}).Get(f.ctx)
			assert.Equal(t, 1, fault.Hits())
			msgs := f.srv.Messages(f.topic)
			require.Len(t, msgs, tc.stored)
			for _, m := range msgs {
				assert.Equal(t, "k/1", string(m.Data))
			}
			if tc.stored == 1 {
				assert.Equal(t, tc.code, status.Code(err))
				return
			}
			require.NoError(t, err)
			assert.NotEqual(t, msgs[0].ID, msgs[1].ID, "each copy has its own message ID")
			assert.Equal(t, msgs[1].ID, id, "the caller sees the retry's ID")
			assert.Equal(t, []int{1, 2}, []int{msgs[0].Seq, msgs[1].Seq})
		})
	}
}

package orderingtest_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"cloud.google.com/go/pubsub/v2"
	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/keyorder/keyorder/ordering/orderingtest"
)

// exactlyOnce makes the fixture's subscription one with exactly-once
// delivery.
func exactlyOnce(p *pubsubpb.Subscription) { p.EnableExactlyOnceDelivery = true }

// ackResult acks m with the official client's AckWithResult and returns
// the status the client made of the server's answer.
func (f *fixture) ackResult(m *pubsub.Message) pubsub.AcknowledgeStatus {
	st, _ := m.AckWithResult().Get(f.ctx)
	return st
}

// seqs lists the sequence of every delivery to sub, in order.
func (f *fixture) seqs(sub string) []int {
	var out []int
	for _, d := range f.srv.Deliveries(sub) {
		out = append(out, d.Seq)
	}
	return out
}

// TestExactlyOnceSupersededAck: once a redelivery supersedes a delivery,
// acking with its ack ID fails for good, and the client says so.
func TestExactlyOnceSupersededAck(t *testing.T) {
	t.Parallel()
	f := newFixture(t, exactlyOnce)
	held := make(chan *pubsub.Message, 1)
	results := make(chan pubsub.AcknowledgeStatus, 1)
	var once sync.Once
	f.receive(f.sub, nil, func(_ context.Context, m *pubsub.Message) {
		first := false
		once.Do(func() { first = true })
		if first {
			held <- m
			return
		}
		results <- f.ackResult(m)
	})
	f.publish(f.topic, []string{"k"}, 0, 1)
	stale := recv(t, held, "the first delivery")

	n, err := f.srv.RedeliverKey(f.sub, "k")
	require.NoError(t, err)
	require.Equal(t, 1, n)
	assert.Equal(t, pubsub.AcknowledgeStatusSuccess, recv(t, results, "the redelivery's ack"))
	assert.Equal(t, pubsub.AcknowledgeStatusInvalidAckID, f.ackResult(stale))
	assert.Equal(t, []int{1, 1}, f.seqs(f.sub))
	assert.Equal(t, 1, f.srv.Stats(f.sub).AckFailures)
	assert.Equal(t, 1, f.srv.Stats(f.sub).Acked)
}

// TestExactlyOnceAckIsFinal: a nack of a key's first message redelivers
// the key's tail. Without exactly-once delivery the acknowledged second
// message comes again; with it, it does not.
func TestExactlyOnceAckIsFinal(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		edit func(*pubsubpb.Subscription)
		want []int
	}{
		{name: "at least once", want: []int{1, 2, 1, 2}},
		{name: "exactly once", edit: exactlyOnce, want: []int{1, 2, 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t, tc.edit)
			held := make(chan *pubsub.Message, 1)
			var mu sync.Mutex
			firsts := 0
			f.receive(f.sub, nil, func(_ context.Context, m *pubsub.Message) {
				if _, seq := parse(t, m.Data); seq == 1 {
					mu.Lock()
					firsts++
					n := firsts
					mu.Unlock()
					if n == 1 {
						held <- m
						return
					}
				}
				assert.Equal(t, pubsub.AcknowledgeStatusSuccess, f.ackResult(m))
			})
			f.publish(f.topic, []string{"k"}, 0, 2)
			nacked := recv(t, held, "k/1")
			f.waitFor("k/2 acked", func() bool { return f.srv.Stats(f.sub).Acked == 1 })

			nacked.Nack()
			f.waitFor("the tail settled", func() bool {
				st := f.srv.Stats(f.sub)
				return st.Nacked == 1 && st.Acked >= len(tc.want)-1 && st.Outstanding == 0
			})
			assert.Equal(t, tc.want, f.seqs(f.sub))
		})
	}
}

// TestExactlyOnceExpiredLease: an ack after the lease ran out fails for
// good; the message is delivered again and its next ack succeeds.
func TestExactlyOnceExpiredLease(t *testing.T) {
	t.Parallel()
	f := newFixture(t, exactlyOnce, orderingtest.WithAckDeadline(300*time.Millisecond))
	results := make(chan pubsub.AcknowledgeStatus, 10)
	var once sync.Once
	f.receive(f.sub, nil, func(ctx context.Context, m *pubsub.Message) {
		first := false
		once.Do(func() { first = true })
		if first {
			// Ack only once the lease has run out.
			f.waitFor("the lease expired", func() bool { return f.srv.Stats(f.sub).Expired >= 1 })
		}
		results <- f.ackResult(m)
	})
	f.publish(f.topic, []string{"k"}, 0, 1)
	assert.Equal(t, pubsub.AcknowledgeStatusInvalidAckID, recv(t, results, "the late ack"))
	// The redelivery's lease is short too: on a loaded machine it may run
	// out again before the ack, and the message comes once more.
	for st := recv(t, results, "a later ack"); st != pubsub.AcknowledgeStatusSuccess; st = recv(t, results, "a later ack") {
		assert.Equal(t, pubsub.AcknowledgeStatusInvalidAckID, st)
	}
	assert.Equal(t, 1, f.srv.Stats(f.sub).Acked)
}

// TestFailAcks: an injected transient failure is retried by the client and
// the ack succeeds; a permanent one fails the ack, and the message comes
// back when its lease runs out.
func TestFailAcks(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		failure orderingtest.AckFailure
		want    []pubsub.AcknowledgeStatus
	}{
		{orderingtest.TransientAckFailure, []pubsub.AcknowledgeStatus{pubsub.AcknowledgeStatusSuccess}},
		{orderingtest.PermanentAckFailure, []pubsub.AcknowledgeStatus{pubsub.AcknowledgeStatusInvalidAckID, pubsub.AcknowledgeStatusSuccess}},
	} {
		t.Run(string(tc.failure), func(t *testing.T) {
			t.Parallel()
			f := newFixture(t, exactlyOnce, orderingtest.WithAckDeadline(time.Second))
			fault := f.srv.FailAcks(orderingtest.Key("k"), tc.failure, 1)
			results := make(chan pubsub.AcknowledgeStatus, 10)
			f.receive(f.sub, nil, func(_ context.Context, m *pubsub.Message) { results <- f.ackResult(m) })
			f.publish(f.topic, []string{"k"}, 0, 1)

			var got []pubsub.AcknowledgeStatus
			for len(got) == 0 || got[len(got)-1] != pubsub.AcknowledgeStatusSuccess {
				got = append(got, recv(t, results, "an ack result"))
			}
			assert.Equal(t, tc.want, got)
			assert.Equal(t, 1, fault.Hits())
			assert.Equal(t, 1, f.srv.Stats(f.sub).Acked)
		})
	}
}

// TestExactlyOnceAckErrorFormat checks the answer itself: INVALID_ARGUMENT
// with an ErrorInfo that names each failed ack ID and only those, while
// the valid ack IDs of the same request take effect. A subscription without
// exactly-once delivery accepts stale ack IDs silently.
func TestExactlyOnceAckErrorFormat(t *testing.T) {
	t.Parallel()
	f := newFixture(t, exactlyOnce)
	f.createSubscription(&pubsubpb.Subscription{Name: subName("plain"), Topic: f.topic})
	dup := f.srv.DuplicateDeliveries(orderingtest.AnyMessage, 0)
	defer dup.Remove()
	f.publish(f.topic, []string{"a", "b"}, 0, 1)
	sc := f.client.SubscriptionAdminClient

	got := f.pullNow(f.sub, 10)
	require.Len(t, got, 2, "no duplicates on an exactly-once subscription")
	valid, expired := got[0].AckId, got[1].AckId
	require.NoError(t, sc.ModifyAckDeadline(f.ctx, &pubsubpb.ModifyAckDeadlineRequest{
		Subscription: f.sub, AckIds: []string{expired}, AckDeadlineSeconds: 0,
	}), "a nack of a valid ack ID")

	for _, call := range []struct {
		name string
		send func(ids []string) error
	}{
		{"Acknowledge", func(ids []string) error {
			return sc.Acknowledge(f.ctx, &pubsubpb.AcknowledgeRequest{Subscription: f.sub, AckIds: ids})
		}},
		{"ModifyAckDeadline", func(ids []string) error {
			return sc.ModifyAckDeadline(f.ctx, &pubsubpb.ModifyAckDeadlineRequest{Subscription: f.sub, AckIds: ids, AckDeadlineSeconds: 30})
		}},
	} {
		err := call.send([]string{valid, expired, "never-issued"})
		st := status.Convert(err)
		require.Equal(t, codes.InvalidArgument, st.Code(), "%s: %v", call.name, err)
		require.Len(t, st.Details(), 1, call.name)
		info, ok := st.Details()[0].(*errdetails.ErrorInfo)
		require.True(t, ok, "%s: %T", call.name, st.Details()[0])
		assert.Equal(t, "EXACTLY_ONCE_ACKID_FAILURE", info.Reason)
		assert.Equal(t, "pubsub.googleapis.com", info.Domain)
		want := map[string]string{expired: string(orderingtest.PermanentAckFailure), "never-issued": string(orderingtest.PermanentAckFailure)}
		if call.name == "ModifyAckDeadline" {
			want[valid] = string(orderingtest.PermanentAckFailure) // acked by the call before
		}
		assert.Equal(t, want, info.Metadata, call.name)
	}
	assert.Equal(t, 1, f.srv.Stats(f.sub).Acked, "the valid ack ID took effect")
	assert.Equal(t, 5, f.srv.Stats(f.sub).AckFailures, "2 ack IDs failed in the first call, 3 in the second")
	assert.Zero(t, dup.Hits())

	plain := f.pullNow(subName("plain"), 10)
	require.Len(t, plain, 4, "duplicates elsewhere")
	require.NoError(t, sc.Acknowledge(f.ctx, &pubsubpb.AcknowledgeRequest{
		Subscription: subName("plain"), AckIds: []string{plain[0].AckId, plain[0].AckId, "never-issued"},
	}))
}

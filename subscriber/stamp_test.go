package subscriber_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"cloud.google.com/go/pubsub/v2"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"

	"github.com/keyorder/keyorder/ordering"
	"github.com/keyorder/keyorder/ordering/orderingtest"
	"github.com/keyorder/keyorder/publisher"
	"github.com/keyorder/keyorder/subscriber"
)

// These tests run keyorder's publisher and subscriber together: the
// publisher stamps (S12), and the subscriber checks the stamps.

// TestPublisherStampsCatchStoredTwice checks the end-to-end promise of
// stamps: when the service stores a message twice because a request's
// response was lost and the official client retried it, the handler runs
// once per message, although the copy has a message ID of its own.
func TestPublisherStampsCatchStoredTwice(t *testing.T) {
	t.Parallel()
	keys := keyNames(3)
	const perKey = 15
	gaps := make(chan subscriber.Gap, 10)
	e := newFakeEnv(t, nil, subscriber.WithGapHandler(func(g subscriber.Gap) { gaps <- g }))
	lost := e.srv.LosePublishResponses(orderingtest.Data("key-1/7"), codes.Unavailable, 1)
	e.publish(t, keys, perKey)
	require.Equal(t, 1, lost.Hits())
	stored := len(e.srv.Messages(e.topic))
	require.Greater(t, stored, len(keys)*perKey, "the retried request was stored twice")

	tr := newTracker(keys, perKey)
	tr.receiveUntil(t, e.sub, tr.handler(func(context.Context, *subscriber.Delivery) error { return nil }),
		e.settled(func(st orderingtest.Stats) bool { return st.Acked >= stored }))
	st := e.sub.Stats()
	assert.EqualValues(t, stored-len(keys)*perKey, st.Duplicates)
	assert.EqualValues(t, len(keys)*perKey, st.Acked, "each message processed once")
	assert.Empty(t, gaps)
}

// TestPublisherFailedTailIsGap checks that a key's failed tail that is
// never republished shows as a gap at the subscriber, and that a tail the
// publisher's Retry sends again is processed, with the failed numbers
// reported missing: Retry numbers it anew, since the failed numbers may
// have been stored.
func TestPublisherFailedTailIsGap(t *testing.T) {
	t.Parallel()
	for _, retry := range []bool{false, true} {
		t.Run(fmt.Sprintf("retry=%v", retry), func(t *testing.T) {
			t.Parallel()
			var (
				mu   sync.Mutex
				gaps []subscriber.Gap
				got  []string
			)
			e := newFakeEnv(t, nil, subscriber.WithGapHandler(func(g subscriber.Gap) {
				mu.Lock()
				defer mu.Unlock()
				gaps = append(gaps, g)
			}))
			ctx := testContext(t)
			p, err := publisher.New(e.client, e.topic, publisher.WithPublishSettings(oneMessageBatches()))
			require.NoError(t, err)
			defer func() { require.NoError(t, p.Close(ctx)) }()
			pub := func(i int) *publisher.Result {
				return p.Publish(ctx, &publisher.Message{Data: []byte(fmt.Sprintf("acct/%d", i))}, publisher.WithOrderingKey("acct"))
			}
			for i := 1; i <= 3; i++ {
				_, err := pub(i).Get(ctx)
				require.NoError(t, err)
			}
			// 4 fails for good, and 5 behind it as its key's tail (P4).
			hold := e.srv.HoldPublish(orderingtest.Data("acct/4"))
			fail := e.srv.FailPublish(orderingtest.Data("acct/4"), codes.InvalidArgument, 1)
			failed := []*publisher.Result{pub(4)}
			require.NoError(t, hold.Wait(ctx, 1))
			failed = append(failed, pub(5))
			hold.Remove()
			for _, r := range failed {
				_, err := r.Get(ctx)
				require.Error(t, err)
			}
			fail.Remove()
			want := []string{"acct/1", "acct/2", "acct/3"}
			if retry {
				retried, err := p.Retry(ctx, failed...)
				require.NoError(t, err)
				for _, r := range retried {
					_, err := r.Get(ctx)
					require.NoError(t, err)
				}
				want = append(want, "acct/4", "acct/5")
			}
			for i := 6; i <= 7; i++ {
				_, err := pub(i).Get(ctx)
				require.NoError(t, err)
			}
			want = append(want, "acct/6", "acct/7")

			rctx, cancel := context.WithCancel(ctx)
			done := make(chan error, 1)
			go func() {
				done <- e.sub.Receive(rctx, func(_ context.Context, d *subscriber.Delivery) error {
					mu.Lock()
					defer mu.Unlock()
					assert.Equal(t, p.Producer(), d.Producer)
					got = append(got, string(d.Data))
					return nil
				})
			}()
			require.NoError(t, e.srv.WaitFor(ctx, func() bool { return e.srv.Stats(e.sub.Name()).Acked == len(want) }))
			cancel()
			require.NoError(t, <-done)

			mu.Lock()
			defer mu.Unlock()
			assert.Equal(t, want, got)
			require.Len(t, gaps, 1, "numbers 4 and 5 were never stored")
			epoch, _ := ordering.SplitSeq(gaps[0].Seq)
			assert.Equal(t, ordering.MakeSeq(epoch, 4), gaps[0].From)
			assert.Equal(t, ordering.MakeSeq(epoch, 5), gaps[0].To)
			assert.Equal(t, "acct", gaps[0].Key)
			assert.Equal(t, p.Producer(), gaps[0].Producer)
		})
	}
}

// oneMessageBatches returns publish settings that send each message in a
// request of its own, so that a fault can pick one.
func oneMessageBatches() pubsub.PublishSettings {
	s := pubsub.DefaultPublishSettings
	s.CountThreshold = 1
	s.DelayThreshold = time.Millisecond
	return s
}

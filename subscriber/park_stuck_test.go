package subscriber_test

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"

	"github.com/keyorder/keyorder/subscriber"
)

// isControl matches the control log's events of kind.
func isControl(kind string) func(*pubsubpb.PubsubMessage) bool {
	return func(m *pubsubpb.PubsubMessage) bool {
		return strings.Contains(string(m.GetData()), `"kind":"`+kind+`"`)
	}
}

// TestRequestAfterALocalReleaseGaveUp: a service's own Release of key-0
// runs while an operator's request for it is pending; the Release's ctx
// ends, and the control log's record that it stopped loses its publish
// response. Nothing else moves the log. The Receive must still carry out
// the pending request, within a few seconds, once the stop frees the
// park: it looks when its own release ends, and again when the stop is
// applied. A release asked for again then says the key was released.
// The handler's backoff is 10 s and the bound 5 s: a request left
// pending, with nothing to carry it out, fails the test, and so does a
// publish to the control log that waits the handler's backoff (a barrier
// marker, a release's progress, a claim), which it must not: the control
// log retries its own publishes after a short backoff of its own.
func TestRequestAfterALocalReleaseGaveUp(t *testing.T) {
	t.Parallel()
	e := newParkEnv(t, nil, subscriber.WithMaxAttempts(2))
	e.publishSeqs(t, "key-0", 1, 3)
	var fixed, blocked atomic.Bool
	running, proceed := make(chan struct{}), make(chan struct{})
	service := e.reopen(t, e.client, subscriber.WithMaxAttempts(2), subscriber.WithBackoff(10*time.Second, time.Minute))
	stop := start(t, service, func(ctx context.Context, d *subscriber.Delivery) error {
		if string(d.Data) != "key-0/2" {
			return nil
		}
		if !fixed.Load() {
			return subscriber.Permanent(errInjected)
		}
		if blocked.CompareAndSwap(false, true) {
			close(running)
			<-proceed
			return errInjected // to be retried, after the local Release gave up
		}
		return nil
	})
	defer stop()
	e.awaitParked(t, "key-0", 2)
	fixed.Store(true)

	ctx := testContext(t)
	rctx, cancel := context.WithCancel(ctx)
	local := make(chan error, 1)
	go func() { local <- service.Release(rctx, "key-0") }()
	<-running
	require.NoError(t, e.sub.RequestRelease(ctx, "key-0"))
	// Stored, then refused to the client with a code it does not retry:
	// the stop applies, and its writer sees a failure.
	lost := e.srv.LosePublishResponses(isControl("stop"), codes.FailedPrecondition, 1)
	cancel()
	close(proceed)
	require.ErrorIs(t, await(t, local), context.Canceled)
	require.NoError(t, lost.Wait(ctx, 1))

	begun := time.Now()
	wctx, wcancel := context.WithTimeout(ctx, 5*time.Second)
	defer wcancel()
	require.NoError(t, e.srv.WaitFor(wctx, func() bool {
		list, err := e.sub.Parked(wctx)
		return err == nil && len(list) == 0
	}), "the request was not carried out in 5 s: %s", e.describe())
	t.Logf("carried out in %v", time.Since(begun))

	// Asked again, with or without a Receive: it says the key was
	// released, not only that it is not parked.
	for _, s := range []*subscriber.Subscription{e.sub, service} {
		err := s.Release(ctx, "key-0")
		require.ErrorIs(t, err, subscriber.ErrReleased)
		require.ErrorIs(t, err, subscriber.ErrNotParked)
		require.ErrorIs(t, s.RequestRelease(ctx, "key-0"), subscriber.ErrReleased)
	}
	require.NotErrorIs(t, e.sub.Release(ctx, "key-9"), subscriber.ErrReleased)
}

// TestParkedReturnsByItsCtx: with the control topic's publishes held, no
// marker comes back, so no Log can catch up. Parked on the process whose
// Receive runs returns when its ctx ends, with the keys that Receive last
// saw; Parked on a process without a Receive, whose replay never
// finishes, returns ctx's error within about a second of its end, not
// after the one-off Log's drain.
func TestParkedReturnsByItsCtx(t *testing.T) {
	t.Parallel()
	e := newParkEnv(t, nil, subscriber.WithMaxAttempts(1))
	e.publishSeqs(t, "key-0", 1, 3)
	service := e.reopen(t, e.client, subscriber.WithMaxAttempts(1))
	stop := start(t, service, func(_ context.Context, d *subscriber.Delivery) error {
		if string(d.Data) == "key-0/2" {
			return errInjected
		}
		return nil
	})
	defer stop()
	e.awaitParked(t, "key-0", 2)
	hold := e.srv.HoldPublish(isControl("marker"))
	defer hold.Remove()

	const bound = 500 * time.Millisecond
	ctx, cancel := context.WithTimeout(testContext(t), bound)
	defer cancel()
	begun := time.Now()
	list, err := service.Parked(ctx)
	took := time.Since(begun)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.Less(t, took, bound+time.Second, "with a Receive")
	require.Len(t, list, 1, "what the Receive knows")
	require.Equal(t, "key-0", list[0].Key)

	ctx, cancel = context.WithTimeout(testContext(t), bound)
	defer cancel()
	begun = time.Now()
	_, err = e.sub.Parked(ctx)
	took = time.Since(begun)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.Less(t, took, bound+2*time.Second, "without a Receive")
	hold.Remove()
	_, err = service.Parked(testContext(t))
	require.NoError(t, err, "the markers go through again")
}

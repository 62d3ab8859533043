package subscriber_test

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/keyorder/keyorder/subscriber"
)

// ranData records the data of the messages a handler ran, after the fix.
type ranData struct {
	mu  sync.Mutex
	ran []string
}

func (r *ranData) add(data string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.ran = append(r.ran, data)
}

func (r *ranData) has(prefix string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, d := range r.ran {
		if strings.HasPrefix(d, prefix) {
			return true
		}
	}
	return false
}

// TestWithdrawRelease: an operator asks for two keys' release while no
// Receive runs, then withdraws the request on key-0. Parked shows it
// withdrawn at once; a Receive that starts later carries out key-1's
// request and leaves key-0 parked, none of its messages run. Withdrawing
// again, or on a key not parked, says why it cannot.
func TestWithdrawRelease(t *testing.T) {
	t.Parallel()
	e := newParkEnv(t, nil, subscriber.WithMaxAttempts(1))
	e.publishSeqs(t, "key-0", 1, 3)
	e.publishSeqs(t, "key-1", 1, 3)
	var fixed atomic.Bool
	var ran ranData
	h := func(_ context.Context, d *subscriber.Delivery) error {
		if !fixed.Load() {
			if strings.HasSuffix(string(d.Data), "/2") {
				return errInjected
			}
			return nil
		}
		ran.add(string(d.Data))
		return nil
	}
	stopFirst := start(t, e.reopen(t, e.client, subscriber.WithMaxAttempts(1)), h)
	e.awaitParked(t, "key-0", 2)
	e.awaitParked(t, "key-1", 2)
	stopFirst()

	ctx := testContext(t)
	require.ErrorIs(t, e.sub.WithdrawRelease(ctx, "key-0"), subscriber.ErrNoRequest)
	require.ErrorIs(t, e.sub.WithdrawRelease(ctx, "key-9"), subscriber.ErrNotParked)
	require.NoError(t, e.sub.RequestRelease(ctx, "key-0"))
	require.NoError(t, e.sub.RequestRelease(ctx, "key-1"))
	e.awaitRequested(t, "key-0")
	require.NoError(t, e.sub.WithdrawRelease(ctx, "key-0"))
	k := e.awaitKey(t, "key-0", "no request", func(k subscriber.ParkedKey) bool { return true })
	assert.Zero(t, k.ReleaseRequested, "withdrawn")
	assert.Empty(t, k.ReleaseRequestedBy)
	require.ErrorIs(t, e.sub.WithdrawRelease(ctx, "key-0"), subscriber.ErrNoRequest, "withdrawn already")

	fixed.Store(true)
	later := e.reopen(t, e.client, subscriber.WithMaxAttempts(1))
	stop := start(t, later, h)
	require.NoError(t, e.srv.WaitFor(ctx, func() bool {
		list, err := e.sub.Parked(ctx)
		return err == nil && len(list) == 1
	}), "key-1 was never released: %s", e.describe())
	stop()
	assert.False(t, ran.has("key-0/"), "key-0's messages ran: %v", ran.ran)
	assert.True(t, ran.has("key-1/2"))
	k = e.awaitParked(t, "key-0", 2)
	assert.Zero(t, k.ReleaseRequested)
	assert.False(t, k.Releasing)
}

// TestWithdrawRunningRelease: a release a Receive has begun cannot be
// withdrawn; WithdrawRelease says so with ErrReleasing, and the release
// goes on to unpark the key.
func TestWithdrawRunningRelease(t *testing.T) {
	t.Parallel()
	e := newParkEnv(t, nil, subscriber.WithMaxAttempts(1))
	e.publishSeqs(t, "key-0", 1, 3)
	var fixed atomic.Bool
	running, proceed := make(chan struct{}), make(chan struct{})
	service := e.reopen(t, e.client, subscriber.WithMaxAttempts(1))
	stop := start(t, service, func(_ context.Context, d *subscriber.Delivery) error {
		if string(d.Data) == "key-0/2" {
			if !fixed.Load() {
				return errInjected
			}
			close(running)
			<-proceed
		}
		return nil
	})
	e.awaitParked(t, "key-0", 2)
	fixed.Store(true)
	ctx := testContext(t)
	require.NoError(t, e.sub.RequestRelease(ctx, "key-0"))
	select {
	case <-running:
	case <-ctx.Done():
		t.Fatalf("the release never ran: %s", e.describe())
	}
	require.ErrorIs(t, e.sub.WithdrawRelease(ctx, "key-0"), subscriber.ErrReleasing)
	close(proceed)
	require.NoError(t, e.srv.WaitFor(ctx, func() bool {
		list, err := e.sub.Parked(ctx)
		return err == nil && len(list) == 0
	}), "the release did not go on: %s", e.describe())
	stop()
}

// TestWithdrawBeforeASlowClaim: a Receive sees an operator's request and
// claims its release, but the claim is slow to be stored (the fake holds
// it); the operator withdraws the request meanwhile, which the log takes
// first. The waiting Release is told the request was withdrawn
// (ErrWithdrawn); when the claim lands, the log refuses it, for the
// request it carries out has ended: nobody releases the key, and none of
// its messages run, though the handler would take them now.
func TestWithdrawBeforeASlowClaim(t *testing.T) {
	t.Parallel()
	e := newParkEnv(t, nil, subscriber.WithMaxAttempts(1))
	e.publishSeqs(t, "key-0", 1, 3)
	var fixed atomic.Bool
	var ran ranData
	service := e.reopen(t, e.client, subscriber.WithMaxAttempts(1))
	stop := start(t, service, func(_ context.Context, d *subscriber.Delivery) error {
		if !fixed.Load() {
			if string(d.Data) == "key-0/2" {
				return errInjected
			}
			return nil
		}
		ran.add(string(d.Data))
		return nil
	})
	defer stop()
	e.awaitParked(t, "key-0", 2)
	fixed.Store(true)

	ctx := testContext(t)
	hold := e.srv.HoldPublish(func(m *pubsubpb.PubsubMessage) bool { return strings.Contains(string(m.GetData()), `"kind":"claim"`) })
	defer hold.Remove()
	released := make(chan error, 1)
	go func() { released <- e.sub.Release(ctx, "key-0") }()
	require.NoError(t, hold.Wait(ctx, 1), "the Receive claims the request")
	require.NoError(t, e.sub.WithdrawRelease(ctx, "key-0"), "nobody releases the key yet, as the log has it")
	err := await(t, released)
	require.ErrorIs(t, err, subscriber.ErrWithdrawn, "the waiting Release is told the truth")
	assert.NotErrorIs(t, err, subscriber.ErrParkedAgain)

	hold.Remove()                    // the claim lands now, after the withdraw
	list, err := service.Parked(ctx) // synced: the claim has been applied
	require.NoError(t, err)
	require.Len(t, list, 1)
	assert.False(t, list[0].Releasing, "the claim of a withdrawn request was refused")
	assert.Zero(t, list[0].ReleaseRequested)
	assert.Equal(t, 2, list[0].Messages)
	stop()
	assert.False(t, ran.has("key-0/"), "a release of the withdrawn request ran: %v", ran.ran)
	e.awaitParked(t, "key-0", 2)
}

package publisher_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"cloud.google.com/go/pubsub/v2"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/keyorder/keyorder/internal/harness"
	"github.com/keyorder/keyorder/ordering/orderingtest"
	"github.com/keyorder/keyorder/publisher"
)

// fakeEnv is an ordering/orderingtest server, a client and a topic, for
// tests that hold or fail chosen requests without stalling the others.
type fakeEnv struct {
	srv    *orderingtest.Server
	client *pubsub.Client
	topic  string
}

func newFakeEnv(t testing.TB) fakeEnv {
	t.Helper()
	srv, client := harness.Fake(t)
	return fakeEnv{srv: srv, client: client, topic: newTopic(t, client)}
}

// storedData returns the data of the stored messages with ordering key
// key, in publish order.
func (e fakeEnv) storedData(key string) []string {
	var out []string
	for _, m := range e.srv.Messages("projects/" + harness.Project + "/topics/" + e.topic) {
		if m.OrderingKey == key {
			out = append(out, string(m.Data))
		}
	}
	return out
}

// newPublisher returns a publisher on e's topic, closed when the test
// ends after every fault has been removed.
func (e fakeEnv) newPublisher(t testing.TB, faults []*orderingtest.Fault, opts ...publisher.Option) *publisher.Publisher {
	t.Helper()
	p, err := publisher.New(e.client, e.topic, opts...)
	require.NoError(t, err)
	t.Cleanup(func() {
		for _, f := range faults {
			f.Remove() // Close would wait for a held request
		}
		ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
		defer cancel()
		require.NoError(t, p.Close(ctx))
	})
	return p
}

// holdThenFail holds the Publish requests that carry the message data on
// e's server until the returned fault is removed, and fails the first
// fails of them with FailedPrecondition, a code the official client does
// not retry.
func (e fakeEnv) holdThenFail(data string, fails int) *orderingtest.Fault {
	hold := e.srv.HoldPublish(orderingtest.Data(data))
	e.srv.FailPublish(orderingtest.Data(data), codes.FailedPrecondition, fails)
	return hold
}

// failTail publishes K-0..K-7 on p, one per batch, and makes K-2 fail
// while K-3..K-7 wait behind it: it returns K-2's Result and its tail's.
func failTail(t *testing.T, ctx context.Context, e fakeEnv, p *publisher.Publisher, hold *orderingtest.Fault) (failing *publisher.Result, tail []*publisher.Result) {
	t.Helper()
	pub := func(i int) *publisher.Result {
		return p.Publish(ctx, &publisher.Message{Data: []byte(fmt.Sprintf("K-%d", i))}, publisher.WithOrderingKey("K"))
	}
	for i := 0; i < 2; i++ {
		_, err := pub(i).Get(ctx)
		require.NoError(t, err)
	}
	failing = pub(2)
	require.NoError(t, hold.Wait(ctx, 1))
	for i := 3; i < 8; i++ {
		tail = append(tail, pub(i))
	}
	hold.Remove()
	for _, r := range append([]*publisher.Result{failing}, tail...) {
		_, err := r.Get(ctx)
		require.Error(t, err)
	}
	return failing, tail
}

// TestRetryFailedTail checks that Retry sends a failed tail again in its
// key's order, whatever the order it is given in, and only once the whole
// tail is given: the server ends up with K-0..K-7 in order (P3, P4).
func TestRetryFailedTail(t *testing.T) {
	t.Parallel()
	e := newFakeEnv(t)
	ctx := testContext(t)
	hold := e.holdThenFail("K-2", 1)
	p := e.newPublisher(t, []*orderingtest.Fault{hold}, publisher.WithPublishSettings(settings(1)))

	failing, tail := failTail(t, ctx, e, p, hold)
	failed := append([]*publisher.Result{failing}, tail...)
	shuffled := append([]*publisher.Result(nil), failed...)
	rand.Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })

	retried, err := p.Retry(ctx, shuffled...)
	require.NoError(t, err)
	require.Len(t, retried, len(shuffled))
	for i, r := range retried {
		_, err := r.Get(ctx)
		require.NoError(t, err, "retry %d", i)
	}
	assert.Equal(t, []string{"K-0", "K-1", "K-2", "K-3", "K-4", "K-5", "K-6", "K-7"}, e.storedData("K"))

	// The message has moved to the new Result, which let it go once
	// published; the old ones cannot be retried again.
	for i, r := range failed {
		assert.False(t, publisher.HoldsMessage(r), "old result %d", i)
		assert.False(t, publisher.HoldsMessage(retried[i]), "new result %d", i)
	}
	_, err = p.Retry(ctx, failing)
	require.ErrorIs(t, err, publisher.ErrNotRetryable)
}

// TestRetryAfterNewerMessages pins what Retry documents: a key that went on
// after its failure (P5) gets the retried tail after what it sent since.
func TestRetryAfterNewerMessages(t *testing.T) {
	t.Parallel()
	e := newFakeEnv(t)
	ctx := testContext(t)
	hold := e.holdThenFail("K-2", 1)
	p := e.newPublisher(t, []*orderingtest.Fault{hold}, publisher.WithPublishSettings(settings(1)))

	failing, tail := failTail(t, ctx, e, p, hold)
	_, err := p.Publish(ctx, &publisher.Message{Data: []byte("K-8")}, publisher.WithOrderingKey("K")).Get(ctx)
	require.NoError(t, err)
	retried, err := p.Retry(ctx, append([]*publisher.Result{failing}, tail...)...)
	require.NoError(t, err)
	for _, r := range retried {
		_, err := r.Get(ctx)
		require.NoError(t, err)
	}
	assert.Equal(t, []string{"K-0", "K-1", "K-8", "K-2", "K-3", "K-4", "K-5", "K-6", "K-7"}, e.storedData("K"))
}

// TestRetryKeepsFirstPublishOrderAcrossRetries checks that a Result keeps
// the place of its first Publish call through its retries: k/1 is retried
// alone and fails again, and its new Result, retried with k/2 in one call,
// still goes before k/2 (P3).
func TestRetryKeepsFirstPublishOrderAcrossRetries(t *testing.T) {
	t.Parallel()
	e := newFakeEnv(t)
	ctx := testContext(t)
	hold := e.holdThenFail("k/1", 2)
	p := e.newPublisher(t, []*orderingtest.Fault{hold}, publisher.WithPublishSettings(settings(1)))
	pub := func(data string) *publisher.Result {
		return p.Publish(ctx, &publisher.Message{Data: []byte(data)}, publisher.WithOrderingKey("k"))
	}

	// k/1 and k/2 fail together: k/2 waits behind k/1, which fails.
	first := pub("k/1")
	require.NoError(t, hold.Wait(ctx, 1))
	second := pub("k/2")
	hold.Remove()
	for _, r := range []*publisher.Result{first, second} {
		_, err := r.Get(ctx)
		require.Error(t, err)
	}

	// k/1 is retried alone, and fails again.
	again, err := p.Retry(ctx, first)
	require.NoError(t, err)
	_, err = again[0].Get(ctx)
	require.Error(t, err)

	// k/2 and the retried k/1 go in one call, k/2 first.
	retried, err := p.Retry(ctx, second, again[0])
	require.NoError(t, err)
	for _, r := range retried {
		_, err := r.Get(ctx)
		require.NoError(t, err)
	}
	assert.Equal(t, []string{"k/1", "k/2"}, e.storedData("k"))
}

// TestRetryRefusesAndSendsNothing checks that Retry sends nothing when one
// of its Results cannot be retried, and that the others stay retryable.
func TestRetryRefusesAndSendsNothing(t *testing.T) {
	t.Parallel()
	e := newFakeEnv(t)
	ctx := testContext(t)
	e.srv.FailPublish(orderingtest.Data("fails"), codes.FailedPrecondition, 1)
	hold := e.srv.HoldPublish(orderingtest.Data("held"))
	p := e.newPublisher(t, []*orderingtest.Fault{hold}, publisher.WithPublishSettings(settings(1)))

	failed := p.Publish(ctx, &publisher.Message{Data: []byte("fails")}, publisher.WithOrderingKey("K"))
	_, err := failed.Get(ctx)
	require.Error(t, err)
	published := p.Publish(ctx, &publisher.Message{Data: []byte("ok")}, publisher.WithOrderingKey("K"))
	_, err = published.Get(ctx)
	require.NoError(t, err)
	pending := p.Publish(ctx, &publisher.Message{Data: []byte("held")}, publisher.WithOrderingKey("H"))
	require.NoError(t, hold.Wait(ctx, 1))
	invalid := p.Publish(ctx, &publisher.Message{})

	for _, tc := range []struct {
		name string
		bad  *publisher.Result
	}{
		{"published", published},
		{"pending", pending},
		{"invalid", invalid},
		{"given twice", failed},
		{"nil", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			retried, err := p.Retry(ctx, failed, tc.bad)
			require.ErrorIs(t, err, publisher.ErrNotRetryable)
			assert.Nil(t, retried)
			assert.True(t, publisher.HoldsMessage(failed))
		})
	}
	assert.Equal(t, []string{"ok"}, e.storedData("K"), "nothing was sent again")

	retried, err := p.Retry(ctx, failed)
	require.NoError(t, err)
	_, err = retried[0].Get(ctx)
	require.NoError(t, err)
	assert.Equal(t, []string{"ok", "fails"}, e.storedData("K"))
}

// TestRetryTakesOverRoom checks that a retried message whose failed
// attempt still holds its flow-control room takes that room over. The
// tail waits in the official client's batch for an hour: when its failure
// is reported, its room is still held, and without the takeover Retry
// would find the room full.
func TestRetryTakesOverRoom(t *testing.T) {
	t.Parallel()
	e := newFakeEnv(t)
	ctx := testContext(t)
	// The first message is large enough to be sent alone at once; the
	// tail's small messages wait for the delay threshold, or a flush.
	first := "K-0 " + strings.Repeat("x", 1000)
	hold := e.holdThenFail(first, 1)
	s := slowBatches(100)
	s.ByteThreshold = 1000
	s.FlowControlSettings = pubsub.FlowControlSettings{MaxOutstandingMessages: 6, LimitExceededBehavior: pubsub.FlowControlSignalError}
	p := e.newPublisher(t, []*orderingtest.Fault{hold}, publisher.WithPublishSettings(s))
	pub := func(data string) *publisher.Result {
		return p.Publish(ctx, &publisher.Message{Data: []byte(data)}, publisher.WithOrderingKey("K"))
	}

	failed := []*publisher.Result{pub(first)}
	require.NoError(t, hold.Wait(ctx, 1))
	want := []string{first}
	for i := 1; i < 6; i++ {
		want = append(want, fmt.Sprint("K-", i))
		failed = append(failed, pub(want[i]))
	}
	hold.Remove()
	for _, r := range failed {
		_, err := r.Get(ctx)
		require.Error(t, err)
	}

	retried, err := p.Retry(ctx, failed...)
	require.NoError(t, err, "the tail's room moves to its retry")
	// The retried messages wait until the old tail has drained from the
	// official client (P5), which Flush brings forward.
	require.NoError(t, p.Flush(ctx))
	for _, r := range retried {
		_, err := r.Get(ctx)
		require.NoError(t, err)
	}
	assert.Equal(t, want, e.storedData("K"))
}

// TestRetryRefusedKeepsRoom checks that a Retry refused by flow control
// after taking over room gives it back: once everything has drained, the
// publisher has exactly its room again, no more and no less.
func TestRetryRefusedKeepsRoom(t *testing.T) {
	t.Parallel()
	e := newFakeEnv(t)
	ctx := testContext(t)
	first := "K-0 " + strings.Repeat("x", 1000)
	holdK := e.srv.HoldPublish(orderingtest.Data(first))
	e.srv.FailPublish(orderingtest.Data(first), codes.FailedPrecondition, 1)
	holdL := e.srv.HoldPublish(orderingtest.Key("L"))
	s := slowBatches(100)
	s.ByteThreshold = 1000
	s.FlowControlSettings = pubsub.FlowControlSettings{MaxOutstandingMessages: 6, LimitExceededBehavior: pubsub.FlowControlSignalError}
	p := e.newPublisher(t, []*orderingtest.Fault{holdK, holdL}, publisher.WithPublishSettings(s))
	pub := func(key, data string) *publisher.Result {
		return p.Publish(ctx, &publisher.Message{Data: []byte(data)}, publisher.WithOrderingKey(key))
	}

	failed := []*publisher.Result{pub("K", first)}
	require.NoError(t, holdK.Wait(ctx, 1))
	for i := 1; i < 6; i++ {
		failed = append(failed, pub("K", fmt.Sprint("K-", i)))
	}
	holdK.Remove()
	for _, r := range failed {
		_, err := r.Get(ctx)
		require.Error(t, err)
	}
	// L takes the room K-0 released; the tail still holds the rest.
	l := pub("L", "L-0 "+strings.Repeat("x", 1000))
	require.NoError(t, holdL.Wait(ctx, 1))
	_, err := p.Retry(ctx, failed...)
	require.ErrorIs(t, err, pubsub.ErrFlowControllerMaxOutstandingMessages)

	holdL.Remove()
	require.NoError(t, p.Flush(ctx))
	_, err = l.Get(ctx)
	require.NoError(t, err)
	retried, err := p.Retry(ctx, failed...)
	require.NoError(t, err)
	require.NoError(t, p.Flush(ctx))
	for _, r := range retried {
		_, err := r.Get(ctx)
		require.NoError(t, err)
	}

	// Six messages fit, a seventh does not.
	holdM := e.srv.HoldPublish(orderingtest.Key("M"))
	defer holdM.Remove()
	for i := 0; i < 6; i++ {
		r := pub("M", "M-"+strings.Repeat("x", 1000))
		require.False(t, isReady(r), "message %d refused", i)
	}
	_, err = pub("M", "M-last").Get(ctx)
	require.ErrorIs(t, err, pubsub.ErrFlowControllerMaxOutstandingMessages)
}

// TestRetryFlowControlRefuses checks that Retry refused by flow control
// sends nothing and leaves its Results retryable.
func TestRetryFlowControlRefuses(t *testing.T) {
	t.Parallel()
	e := newFakeEnv(t)
	ctx := testContext(t)
	e.srv.FailPublish(orderingtest.Data("K-0"), codes.FailedPrecondition, 1)
	hold := e.srv.HoldPublish(orderingtest.Key("L"))
	s := settings(1)
	s.FlowControlSettings = pubsub.FlowControlSettings{MaxOutstandingMessages: 3, LimitExceededBehavior: pubsub.FlowControlSignalError}
	p := e.newPublisher(t, []*orderingtest.Fault{hold}, publisher.WithPublishSettings(s))

	// A failed message's room is released before its Result is ready.
	failed := p.Publish(ctx, &publisher.Message{Data: []byte("K-0")}, publisher.WithOrderingKey("K"))
	_, err := failed.Get(ctx)
	require.Error(t, err)
	// L fills the room: its first message is held, the others wait behind
	// it in the official client (P3).
	var ls []*publisher.Result
	for i := 0; i < 3; i++ {
		ls = append(ls, p.Publish(ctx, &publisher.Message{Data: []byte(fmt.Sprint("L-", i))}, publisher.WithOrderingKey("L")))
	}
	require.NoError(t, hold.Wait(ctx, 1))

	retried, err := p.Retry(ctx, failed)
	require.ErrorIs(t, err, pubsub.ErrFlowControllerMaxOutstandingMessages)
	assert.Nil(t, retried)
	assert.True(t, publisher.HoldsMessage(failed))

	hold.Remove()
	for _, r := range ls {
		_, err := r.Get(ctx)
		require.NoError(t, err)
	}
	retried, err = p.Retry(ctx, failed)
	require.NoError(t, err)
	_, err = retried[0].Get(ctx)
	require.NoError(t, err)
	assert.Equal(t, []string{"K-0"}, e.storedData("K"))
}

// TestRetryable checks which causes are worth a retry.
func TestRetryable(t *testing.T) {
	t.Parallel()
	pe := func(err error) error { return &publisher.PublishError{Key: "k", Err: err} }
	for _, tc := range []struct {
		name string
		err  error
		want bool
	}{
		{"unavailable", pe(status.Error(codes.Unavailable, "down")), true},
		{"deadline status", pe(status.Error(codes.DeadlineExceeded, "slow")), true},
		{"publish timeout between attempts", pe(context.DeadlineExceeded), true},
		{"resource exhausted", pe(status.Error(codes.ResourceExhausted, "quota")), true},
		{"aborted", pe(status.Error(codes.Aborted, "x")), true},
		{"internal", pe(status.Error(codes.Internal, "x")), true},
		{"unknown", pe(status.Error(codes.Unknown, "x")), true},
		{"skipped tail of unavailable", &publisher.PublishError{Key: "k", Err: status.Error(codes.Unavailable, "down"), Skipped: true}, true},
		{"wrapped", fmt.Errorf("order 7: %w", pe(status.Error(codes.Unavailable, "down"))), true},
		{"not found", pe(status.Error(codes.NotFound, "no topic")), false},
		{"permission denied", pe(status.Error(codes.PermissionDenied, "x")), false},
		{"unauthenticated", pe(status.Error(codes.Unauthenticated, "x")), false},
		{"invalid argument", pe(status.Error(codes.InvalidArgument, "x")), false},
		{"failed precondition", pe(status.Error(codes.FailedPrecondition, "x")), false},
		{"canceled", pe(status.Error(codes.Canceled, "x")), false},
		{"publisher stopped", pe(pubsub.ErrPublisherStopped), false},
		{"validation", &publisher.ValidationError{Err: publisher.ErrEmptyMessage}, false},
		{"flow control", pubsub.ErrFlowControllerMaxOutstandingMessages, false},
		{"closed", publisher.ErrClosed, false},
		{"Get's own deadline", context.DeadlineExceeded, false},
		{"nil", nil, false},
		{"plain", errors.New("x"), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			assert.Equal(t, tc.want, publisher.Retryable(tc.err))
		})
	}
}

// TestRetryUnordered checks Retry of an unordered message, whose Result is
// the official client's, with and without flow control.
func TestRetryUnordered(t *testing.T) {
	t.Parallel()
	flowControlled := settings(1)
	flowControlled.FlowControlSettings = pubsub.FlowControlSettings{MaxOutstandingMessages: 1, LimitExceededBehavior: pubsub.FlowControlSignalError}
	for _, tc := range []struct {
		name     string
		settings pubsub.PublishSettings
	}{{"no flow control", settings(1)}, {"flow control", flowControlled}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newFakeEnv(t)
			ctx := testContext(t)
			e.srv.FailPublish(orderingtest.Data("u"), codes.Unavailable, 1)
			e.srv.FailPublish(orderingtest.Data("u"), codes.FailedPrecondition, 1)
			p := e.newPublisher(t, nil, publisher.WithPublishSettings(tc.settings))

			failed := p.Publish(ctx, &publisher.Message{Data: []byte("u"), Headers: map[string]string{"h": "v"}})
			_, err := failed.Get(ctx)
			var pe *publisher.PublishError
			require.ErrorAs(t, err, &pe)
			assert.Empty(t, pe.Key)
			retried, err := p.Retry(ctx, failed)
			require.NoError(t, err)
			id, err := retried[0].Get(ctx)
			require.NoError(t, err)
			assert.False(t, publisher.HoldsMessage(failed))
			msgs := e.srv.Messages("projects/" + harness.Project + "/topics/" + e.topic)
			require.Len(t, msgs, 1)
			assert.Equal(t, id, msgs[0].ID)
			assert.Equal(t, map[string]string{"h": "v"}, msgs[0].Attributes)
		})
	}
}

package publisher_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/keyorder/keyorder/ordering/orderingtest"
	"github.com/keyorder/keyorder/publisher"
)

// TestWithAfterFailed: a message published after its predecessor's
// failure was reported is sent once the key resumes (P5), after the
// failed one; WithAfter that predecessor, it fails unsent, as its tail,
// with the same cause, and the next message without WithAfter is sent.
func TestWithAfterFailed(t *testing.T) {
	t.Parallel()
	e := newFakeEnv(t)
	ctx := testContext(t)
	e.srv.FailPublish(orderingtest.Data("k/1"), codes.PermissionDenied, 1)
	p := e.newPublisher(t, nil)
	r1 := p.Publish(ctx, &publisher.Message{Data: []byte("k/1")}, publisher.WithOrderingKey("k"))
	_, err := r1.Get(ctx)
	require.Error(t, err)

	r2 := p.Publish(ctx, &publisher.Message{Data: []byte("k/2")}, publisher.WithOrderingKey("k"), publisher.WithAfter(r1))
	select {
	case <-r2.Ready():
	default:
		t.Fatal("a message after a failed one is failed at once")
	}
	_, err = r2.Get(ctx)
	var pe *publisher.PublishError
	require.True(t, errors.As(err, &pe), "%v", err)
	assert.True(t, pe.Skipped)
	assert.Equal(t, "k", pe.Key)
	assert.Equal(t, codes.PermissionDenied, status.Code(pe.Err))

	r3 := p.Publish(ctx, &publisher.Message{Data: []byte("k/3")}, publisher.WithOrderingKey("k"))
	_, err = r3.Get(ctx)
	require.NoError(t, err, "without WithAfter the key resumed (P5)")
	assert.Equal(t, []string{"k/3"}, e.storedData("k"))
}

// TestWithAfterRun publishes runs of one key, each message WithAfter the
// one before, while the first request of each run fails, so that the
// failure is often reported while the run is still being published: no
// message of a run may be stored after one of its predecessors failed.
func TestWithAfterRun(t *testing.T) {
	t.Parallel()
	e := newFakeEnv(t)
	ctx := testContext(t)
	p := e.newPublisher(t, nil)
	for round := range 5 {
		key := fmt.Sprintf("k%d", round)
		e.srv.FailPublish(orderingtest.Key(key), codes.PermissionDenied, 1)
		var prev *publisher.Result
		var rs []*publisher.Result
		for i := range 400 {
			prev = p.Publish(ctx, &publisher.Message{Data: []byte(fmt.Sprintf("%s/%d", key, i))},
				publisher.WithOrderingKey(key), publisher.WithAfter(prev))
			rs = append(rs, prev)
		}
		failedAt := -1
		for i, r := range rs {
			if _, err := r.Get(ctx); err != nil && failedAt < 0 {
				failedAt = i
			} else if err == nil && failedAt >= 0 {
				t.Fatalf("round %d: message %d published after message %d failed", round, i, failedAt)
			}
		}
		require.Zero(t, failedAt, "the first request failed")
		assert.Empty(t, e.storedData(key), "round %d: nothing of the run stored", round)
	}
}

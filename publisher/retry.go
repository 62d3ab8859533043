package publisher

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Retry publishes again the messages of failed, Results of p that failed
// with a [*PublishError], and returns their new Results in the same order
// as failed. It is how a key's failed tail is retried (P4):
//
//	var failed []*publisher.Result
//	for _, r := range results {
//		if _, err := r.Get(ctx); publisher.Retryable(err) {
//			failed = append(failed, r)
//		}
//	}
//	retried, err := p.Retry(ctx, failed...)
//
// The messages of each key are sent in the order of their first Publish
// calls, whatever their order in failed, so a tail retried in one call
// keeps its order (P3). A Result that Retry returned keeps the place of
// its message's first Publish call, so a message retried again, alone or
// with others of its tail, does too. They are sent after every message of their key
// published before Retry, including any published after the failure was
// reported, which the key sent normally (P5): to keep a key's original
// order, retry its failed tail before publishing the key again, and retry
// a key's failures in the order they were reported.
//
// Retry sends every message or none. It sends nothing and returns an
// error if one of failed has not failed with a *PublishError, was retried
// already or is given twice ([ErrNotRetryable]); if flow control refuses
// the messages, or ctx ends while Retry waits for room (see
// [WithPublishSettings]); or after Close ([ErrClosed]). The Results in
// failed can then be retried again. Retry needs room for all of its
// messages at once: a failed message gave its room back when it failed.
//
// A failed Result keeps its message, Data and Headers as given to Publish,
// so that it can be retried: do not modify them until you have retried or
// dropped the Result. Retry moves the message to the new Result.
func (p *Publisher) Retry(ctx context.Context, failed ...*Result) ([]*Result, error) {
	msgs := make([]retried, len(failed))
	for i, r := range failed {
		m, err := r.take(i)
		if err != nil {
			for _, t := range failed[:i] {
				t.untake()
			}
			return nil, err
		}
		msgs[i] = m
		p.restamp(&msgs[i])
	}
	// The messages of a key go in the order of their first Publish calls
	// (P3): seq counts them in the key's shard, and a retried Result keeps
	// its message's first seq.
	order := make([]int, len(failed))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int {
		return cmp.Compare(failed[a].seq, failed[b].seq)
	})

	var bytes int64
	if p.flow != nil {
		// A failed message's room was released when it failed.
		for _, r := range failed {
			bytes += p.flow.bound(r.size)
		}
		if err := p.flow.acquire(ctx, int64(len(failed)), bytes); err != nil {
			p.undoRetry(failed)
			return nil, err
		}
	}

	p.closeMu.RLock()
	defer p.closeMu.RUnlock()
	if p.closed {
		if p.flow != nil {
			for _, r := range failed {
				p.flow.release(r.size)
			}
		}
		p.undoRetry(failed)
		return nil, ErrClosed
	}
	out := make([]*Result, len(failed))
	for _, i := range order {
		m := msgs[i]
		r := &Result{size: failed[i].size, seq: failed[i].seq, room: p.flow != nil, start: p.rec.now()}
		r.msg.Data, r.msg.Attributes, r.msg.OrderingKey = m.data, m.attrs, m.key
		p.send(ctx, r, nil)
		out[i] = r
	}
	for _, r := range failed {
		r.dropTaken()
	}
	return out, nil
}

// retried is what Retry takes of a failed message to send it again.
type retried struct {
	data  []byte
	attrs map[string]string
	key   string
}

// take returns the message of r, Retry's failed[i], and marks it taken,
// or returns an error matching ErrNotRetryable.
func (r *Result) take(i int) (retried, error) {
	if r == nil {
		return retried{}, fmt.Errorf("%w: failed[%d] is nil", ErrNotRetryable, i)
	}
	if !r.isReady() {
		return retried{}, fmt.Errorf("%w: failed[%d] is not ready", ErrNotRetryable, i)
	}
	_, err := r.Get(context.Background())
	var pe *PublishError
	switch {
	case err == nil:
		return retried{}, fmt.Errorf("%w: failed[%d] was published", ErrNotRetryable, i)
	case !errors.As(err, &pe):
		return retried{}, fmt.Errorf("%w: failed[%d] failed with %v, not a *PublishError", ErrNotRetryable, i, err)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.taken {
		return retried{}, fmt.Errorf("%w: failed[%d] was retried already, or is given twice", ErrNotRetryable, i)
	}
	r.taken = true
	return retried{data: r.msg.Data, attrs: r.msg.Attributes, key: r.msg.OrderingKey}, nil
}

// untake gives back the message that take took, for a Retry that sent
// nothing.
func (r *Result) untake() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.taken = false
}

// dropTaken clears the message that Retry has sent again.
func (r *Result) dropTaken() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.dropMessage()
}

// undoRetry gives back the messages a Retry that sends nothing took.
func (p *Publisher) undoRetry(failed []*Result) {
	for _, r := range failed {
		r.untake()
	}
}

// Retryable reports whether err, as returned by [Result.Get], is a publish
// failure that may succeed if retried with [Publisher.Retry]: a
// [*PublishError] whose cause is transient. The publisher has already
// retried such causes, with the client's retry settings, for the publish
// Timeout (60 s by default, see [WithPublishSettings]) before reporting
// them:
//
//   - Unavailable, DeadlineExceeded, ResourceExhausted, Aborted, Internal
//     and Unknown status codes;
//   - context.DeadlineExceeded: the publish Timeout ran out between two
//     attempts.
//
// Every other cause is permanent, and retrying sends the same request to
// the same refusal: NotFound (the topic does not exist), PermissionDenied
// and Unauthenticated (the credentials), InvalidArgument (a message the
// service refused: keyorder checks the limits it knows before sending,
// P6), FailedPrecondition, and the rest. A message of a key's tail
// (Skipped) carries the cause of the failure that stopped its key, so it
// is retryable exactly when that failure is.
//
// Retryable is false for every other error: a *ValidationError (fix the
// message), a flow control error (publish it again when there is room),
// [ErrClosed], and the ctx error of a Get whose wait ended while the
// publish goes on.
func Retryable(err error) bool {
	var pe *PublishError
	if !errors.As(err, &pe) || pe.Err == nil {
		return false
	}
	if errors.Is(pe.Err, context.DeadlineExceeded) {
		return true
	}
	s, ok := status.FromError(pe.Err)
	if !ok {
		return false
	}
	switch s.Code() {
	case codes.Unavailable, codes.DeadlineExceeded, codes.ResourceExhausted, codes.Aborted, codes.Internal, codes.Unknown:
		return true
	}
	return false
}

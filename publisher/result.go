package publisher

import (
	"context"

	"cloud.google.com/go/pubsub/v2"
)

// A Result is the outcome of one [Publisher.Publish] call: the server's
// message ID, or why the message was not published.
//
// A Result of an ordered message becomes ready in the order of its key's
// Publish calls. When it reports a failure, the failure has been recorded
// for the key: a Publish call that starts after Ready is closed is sent
// after the key's failed tail, never within it (P4, P5).
type Result struct {
	// ready is closed once id and err are final. For a direct result it
	// is the official client's own channel.
	ready <-chan struct{}
	done  chan struct{} // ready as a bidirectional channel, for resolve; nil for direct and pre-resolved results
	id    string
	err   error

	// key is the message's ordering key.
	key string
	// under is the official client's result while the message is in its
	// hands; the key's gate clears it once it has seen it ready. A direct
	// result (an unordered message) is under itself: there is no tail to
	// fail and no key to gate.
	under  *pubsub.PublishResult
	direct bool

	// The fields below belong to the key's gate and are guarded by its
	// shard's mutex.
	msg  *pubsub.Message // kept while the message is held back (P5), nil once sent
	size int             // encoded size, released from flow control when the message is done
}

// closed is a channel that is always closed: the ready channel of results
// known at once, so that failing fast costs no channel.
var closed = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

// newResult returns a pending result that the key's gate resolves.
func newResult(key string, size int) *Result {
	done := make(chan struct{})
	return &Result{ready: done, done: done, key: key, size: size}
}

// failed returns a result that is already ready with err.
func failed(err error) *Result {
	return &Result{ready: closed, err: err}
}

// directResult wraps the official client's result for an unordered message.
func directResult(under *pubsub.PublishResult, size int) *Result {
	return &Result{ready: under.Ready(), under: under, direct: true, size: size}
}

// resolve makes r ready with the server's ID or an error. It is called
// once, with the key's shard mutex held, so that the failure a Result
// reports and the state of its key change together.
func (r *Result) resolve(id string, err error) {
	r.id, r.err = id, err
	close(r.done)
}

// isReady reports whether r is ready.
func (r *Result) isReady() bool {
	select {
	case <-r.ready:
		return true
	default:
		return false
	}
}

// Ready returns a channel that is closed when the result is ready. After
// that, Get does not block.
func (r *Result) Ready() <-chan struct{} { return r.ready }

// Get blocks until the message is published or has failed, or ctx ends. It
// returns the server's message ID, or an error: a *ValidationError for a
// message rejected before sending (P6), a *PublishError when the service
// did not take it (P4), [ErrClosed] after Close, a flow control error, or
// ctx.Err() if ctx ends first (the publish itself goes on).
func (r *Result) Get(ctx context.Context) (id string, err error) {
	select {
	case <-r.ready:
	default:
		select {
		case <-r.ready:
		case <-ctx.Done():
			return "", ctx.Err()
		}
	}
	if r.direct {
		id, err := r.under.Get(context.Background())
		if err != nil {
			return "", &PublishError{Key: r.key, Err: err}
		}
		return id, nil
	}
	return r.id, r.err
}

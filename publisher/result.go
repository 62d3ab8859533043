package publisher

import (
	"context"
	"sync"
	"sync/atomic"

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
	// ready is set once id and err are final, with mu held.
	ready atomic.Bool
	// mu guards ch. The channel is made only for a caller that waits
	// while the result is pending: most results are ready before anyone
	// looks, and then cost no channel.
	mu  sync.Mutex
	ch  chan struct{} // closed by resolve; nil if no one waited
	id  string
	err error

	// key is the message's ordering key.
	key string
	// under is the official client's result while the message is in its
	// hands; the key's gate clears it once it has seen it ready, with mu
	// held too if the message failed, as Retry reads it then. A direct
	// result (an unordered message) is under itself: there is no tail to
	// fail and no key to gate.
	under  *pubsub.PublishResult
	direct bool
	// room is set while the message holds flow-control room. It is
	// guarded by the mutex of the list that holds the Result: its key's
	// shard, or the unordered list. Whoever clears it releases the room;
	// Retry may move it to the message's next Result instead.
	room bool
	// taken is set once Retry has taken msg to send it again. Guarded by
	// mu.
	taken bool
	// seq orders the Publish calls of a key, for Retry: it counts the
	// messages of the key's shard. Set by the gate; 0 for unordered
	// messages, which have no order to keep.
	seq uint64

	// msg is the message as the official client takes it, kept here to
	// save an allocation. It is handed over when the message is sent:
	// at once, or after the key's failed tail has drained (P5). Once the
	// official client is done with it, the gate clears it if it was
	// published; a failed message keeps it for Retry, which clears it.
	msg  pubsub.Message
	size int // encoded size, released from flow control when the message is done
}

// closed is a channel that is always closed: the ready channel of results
// that are ready before anyone asks.
var closed = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

// failed returns a result that is already ready with err.
func failed(err error) *Result {
	r := &Result{err: err}
	r.ready.Store(true)
	return r
}

// resolve makes r ready with the server's ID or an error. It is called
// once, with the key's shard mutex held, so that the failure a Result
// reports and the state of its key change together.
func (r *Result) resolve(id string, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.id, r.err = id, err
	r.ready.Store(true)
	if r.ch != nil {
		close(r.ch)
	}
}

// isReady reports whether r is ready, without waiting.
func (r *Result) isReady() bool {
	if r.direct {
		return readyNow(r.under)
	}
	return r.ready.Load()
}

// Ready returns a channel that is closed when the result is ready. After
// that, Get does not block.
func (r *Result) Ready() <-chan struct{} {
	if r.direct {
		return r.under.Ready()
	}
	if r.ready.Load() {
		return closed
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.ready.Load() {
		return closed
	}
	if r.ch == nil {
		r.ch = make(chan struct{})
	}
	return r.ch
}

// Get blocks until the message is published or has failed, or ctx ends. It
// returns the server's message ID, or an error: a *ValidationError for a
// message rejected before sending (P6), a *PublishError when the service
// did not take it (P4), [ErrClosed] after Close, a flow control error, or
// ctx.Err() if ctx ends first (the publish itself goes on).
func (r *Result) Get(ctx context.Context) (id string, err error) {
	if !r.isReady() {
		select {
		case <-r.Ready():
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

// letGo records that the official client is done with the failed message
// of r: Retry may then clear msg. It is called by the gate.
func (r *Result) letGo() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.under = nil
	if r.taken {
		r.msg = pubsub.Message{}
	}
}

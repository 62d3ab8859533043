package publisher

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

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
	// Its 192 bytes, three cache lines, start on a line: Go allocates
	// objects of that size at multiples of 192 in page-aligned spans. The
	// first line holds all that a watch goroutine reads and writes when a
	// message is published, and all that Get reads then: settling a
	// message, and reading its outcome, touch one line (see settleDone).

	// state is pending, waited (pending, and ch made for a waiter),
	// published or failed; it becomes published or failed once, after
	// the outcome is written. A direct result (an unordered message) is
	// direct from the start: its outcome is under's.
	state atomic.Uint32
	size  int32 // encoded size, released from flow control when the message is done
	// under is the official client's result while the message is in its
	// hands; the key's gate clears it once it has seen it ready, with mu
	// held if the message failed, as Retry reads it then. A direct result
	// keeps it: it is the answer.
	under *pubsub.PublishResult
	// msg is the message as the official client takes it, kept here to
	// save an allocation; msg.OrderingKey is the message's key. It is
	// handed over when the message is sent: at once, or after the key's
	// failed tail has drained (P5). Once the message is published, msg.ID
	// holds the server's ID (the official client ignores ID when it
	// publishes) and the caller's data and attributes are dropped. A
	// failed message keeps them for Retry, which drops them.
	msg pubsub.Message

	err error // why the message failed, once state is failed
	// seq orders the Publish calls of a key, for Retry (P3): it counts
	// the Publish calls of the key's shard. Set by the gate at the first
	// Publish call of the message, and carried by Retry to the Results
	// that send it again, so that a message retried more than once keeps
	// its first place; 0 for unordered messages, which have no order to
	// keep.
	seq uint64
	// mu guards ch, taken, and under and msg once the message has failed.
	// The channel is made only for a caller that waits while the result
	// is pending: most results are ready before anyone looks, and then
	// cost no channel.
	mu sync.Mutex
	ch chan struct{} // closed by resolve; nil if no one waited
	// room is set while the message holds flow-control room. Once the
	// message has failed, Retry may move the room to the message's next
	// Result, so from then on room is guarded by the mutex of the list
	// that holds the Result: its key's gate, or the unordered list.
	// Whoever clears it releases the room.
	room bool
	// taken is set once Retry has taken msg to send it again. Guarded by
	// mu.
	taken bool
	// start is when Publish (or Retry) was called, by recorder.now:
	// for keyorder.publisher.publish.duration and the rate check.
	start time.Duration
	// gate is the key's gate the message was enqueued on, set by enqueue
	// before Publish returns and never changed; nil for an unordered or a
	// refused message. Get waits through it (keyState.await), and Ready
	// makes it watched. Once the gate is deleted it holds nothing else.
	gate *keyState
}

// Result states.
const (
	pending uint32 = iota
	waited
	published
	failed
	direct
)

// closed is a channel that is always closed: the ready channel of results
// that are ready before anyone asks.
var closed = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

// fail makes r, which was never sent, ready with err, and returns it. It
// lets go of the message: the caller still has it, and Retry takes only
// messages that failed in the service.
func (r *Result) fail(err error) *Result {
	r.msg = pubsub.Message{}
	r.room = false
	r.err = err
	r.state.Store(failed)
	return r
}

// resolve makes r ready with the server's ID or an error. Only the key's
// watch goroutine calls it, once: for a failure with the key's gate mutex
// held, so that the failure a Result reports and the state of its key
// change together (P4, P5).
func (r *Result) resolve(id string, err error) {
	outcome := published
	if err != nil {
		r.err, outcome = err, failed
	} else {
		r.msg.ID = id
	}
	if r.state.Swap(outcome) == waited {
		r.mu.Lock()
		close(r.ch)
		r.mu.Unlock()
	}
}

// isDirect reports whether r is an unordered message's, answered by the
// official result. It never changes once Publish has returned r.
func (r *Result) isDirect() bool { return r.state.Load() == direct }

// hasFailed reports whether r is ready with a failure.
func (r *Result) hasFailed() bool { return r.state.Load() == failed }

// isReady reports whether r is ready, without waiting.
func (r *Result) isReady() bool {
	switch r.state.Load() {
	case published, failed:
		return true
	case direct:
		return readyNow(r.under)
	}
	return false
}

// Ready returns a channel that is closed when the result is ready. After
// that, Get does not block.
//
// Only a goroutine of the publisher's closes the channel: asking for it
// while the result is pending starts one for the key, where Get waits on
// the caller's own goroutine (see the package documentation, Cost).
func (r *Result) Ready() <-chan struct{} {
	switch r.state.Load() {
	case published, failed:
		return closed
	case direct:
		return r.under.Ready()
	}
	if r.gate != nil {
		// Only a watcher closes ch.
		r.gate.watchNow()
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.ch == nil {
		r.ch = make(chan struct{})
	}
	// resolve closes ch only if it finds the state waited; once ready,
	// ch is never closed, and closed stands in for it.
	if r.state.CompareAndSwap(pending, waited) || r.state.Load() == waited {
		return r.ch
	}
	return closed
}

// Get blocks until the message is published or has failed, or ctx ends. It
// returns the server's message ID, or an error: a *ValidationError for a
// message rejected before sending (P6), a *PublishError when the service
// did not take it (P4), [ErrClosed] after Close, a flow control error, or
// ctx.Err() if ctx ends first (the publish itself goes on).
func (r *Result) Get(ctx context.Context) (id string, err error) {
	if !r.isReady() {
		if err := r.wait(ctx); err != nil {
			return "", err
		}
	}
	switch r.state.Load() {
	case published:
		return r.msg.ID, nil
	case direct:
		id, err := r.under.Get(context.Background())
		if err != nil {
			// Direct results are unordered: no key.
			return "", &PublishError{Err: err}
		}
		return id, nil
	}
	return "", r.err
}

// wait waits until r is ready or ctx ends: through its lazy gate if it can
// (keyState.await), or else on its Ready channel.
func (r *Result) wait(ctx context.Context) error {
	if r.gate != nil {
		if ok, err := r.gate.await(ctx, r); ok || err != nil {
			return err
		}
	}
	select {
	case <-r.Ready():
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// letGo records that the official client is done with the failed message
// of r: Retry may then clear msg. It is called by the gate.
func (r *Result) letGo() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.under = nil
	if r.taken {
		r.dropMessage()
	}
}

// dropMessage lets go of the caller's data and attributes once no one
// needs them: the key and the unset fields can stay.
func (r *Result) dropMessage() {
	r.msg.Data, r.msg.Attributes = nil, nil
}

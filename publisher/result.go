package publisher

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
)

// A Result is the outcome of one [Publisher.Publish] call: the server's
// message ID, or why the message was not published.
//
// A Result of an ordered message becomes ready in the order of its key's
// Publish calls. When it reports a failure, the failure has been recorded
// for the key: a Publish call that starts after Ready is closed is sent
// after the key's failed tail, never within it (P4, P5).
//
// A Result is one allocation with its message, which the request carries
// as it is: the publisher copies nothing to send it. Its Ready channel is
// made only for a caller that waits while it is pending.
type Result struct {
	// state is pending, waited (pending, and ch made for a waiter),
	// published or failed; it becomes published or failed once, after
	// the outcome is written.
	state atomic.Uint32
	size  int32 // encoded size (an upper bound), released from flow control when the message is done
	// q is the key's queue the message was enqueued on, nil for a
	// refused message; set with the shard's mutex held.
	q *keyQueue
	// msg is the message as the request carries it; msg.OrderingKey is
	// the message's key. A sender reads it while the message is in
	// flight. Once the message is published, msg.MessageId holds the
	// server's ID and the caller's data and attributes are dropped. A
	// failed message keeps them for Retry, which drops them.
	msg pubsubpb.PubsubMessage

	err error // why the message failed, once state is failed
	// seq orders the Publish calls of a key, for Retry (P3): it counts
	// the Publish calls of the key's shard. Set at the first Publish call
	// of the message, and carried by Retry to the Results that send it
	// again, so that a message retried more than once keeps its first
	// place; 0 for unordered messages, which have no order to keep.
	seq uint64
	// mu guards ch, and taken and msg once the message has failed.
	mu sync.Mutex
	ch chan struct{} // closed by resolve; nil if no one waited
	// room is set while the message holds flow-control room; guarded by
	// its shard's mutex while the message is outstanding. Whoever clears
	// it releases the room.
	room bool
	// taken is set once Retry has taken msg to send it again. Guarded by
	// mu.
	taken bool
	// start is when Publish (or Retry) was called, by recorder.now:
	// for keyorder.publisher.publish.duration and the rate check.
	start time.Duration
	// span is the message's create span when the client traces
	// (trace.go), ended when r becomes ready; nil otherwise.
	span *createSpan
}

// Result states.
const (
	pending uint32 = iota
	waited
	published
	failed
)

// closed is a channel that is always closed: the ready channel of results
// that are ready before anyone asks.
var closed = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

// fail makes r, which was never sent, ready with err, and returns it. It
// lets go of the message: the caller still has it, and Retry takes only
// messages that failed in the service.
func (r *Result) fail(err error) *Result {
	r.endSpan("", err)
	r.dropMessage()
	r.msg.OrderingKey = ""
	r.room = false
	r.err = err
	r.state.Store(failed)
	return r
}

// resolve makes r ready with the server's ID or an error. The sender that
// settles r's request calls it, once, with the shard's mutex held, so that
// the failure a Result reports and the state of its key change together
// (P4, P5).
func (r *Result) resolve(id string, err error) {
	r.endSpan(id, err)
	outcome := published
	if err != nil {
		r.err, outcome = err, failed
	} else {
		r.msg.MessageId = id
	}
	if r.state.Swap(outcome) == waited {
		r.mu.Lock()
		close(r.ch)
		r.mu.Unlock()
	}
}

// endSpan ends r's create span, if it has one, with its outcome, before
// r becomes ready: whoever sees r ready finds the span ended.
func (r *Result) endSpan(id string, err error) {
	if r.span != nil {
		r.span.end(id, err)
		r.span = nil
	}
}

// hasFailed reports whether r is ready with a failure.
func (r *Result) hasFailed() bool { return r.state.Load() == failed }

// isReady reports whether r is ready, without waiting.
func (r *Result) isReady() bool {
	s := r.state.Load()
	return s == published || s == failed
}

// Ready returns a channel that is closed when the result is ready. After
// that, Get does not block. The channel is made on the first call while
// the result is pending.
func (r *Result) Ready() <-chan struct{} {
	if r.isReady() {
		return closed
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
		select {
		case <-r.Ready():
		case <-ctx.Done():
			return "", ctx.Err()
		}
	}
	if r.state.Load() == published {
		return r.msg.MessageId, nil
	}
	return "", r.err
}

// dropMessage lets go of the caller's data and attributes once no one
// needs them: the key and the ID stay.
func (r *Result) dropMessage() {
	r.msg.Data, r.msg.Attributes = nil, nil
}

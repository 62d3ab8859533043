package engine

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"cloud.google.com/go/pubsub/v2"
)

// Shutdown (S7) comes in two phases, so that it never leaves a message
// leased to a stream that nobody reads (S11).
//
// A nack makes the service send the message again at once, with its key's
// tail, and while a stream of this Receive is open, that is where it goes.
// The official client stops reading its stream when its context ends, but
// closes the stream only once every message it handed over is settled: a
// nack sent in between is answered on a stream nobody reads, and the
// messages stay leased there until the stream's ack deadline, up to a
// minute, while the next Receive gets nothing of their keys. Closing the
// streams first does not help either: the official client then stops
// sending acks.
//
// So the official Receive runs on a context of its own, which outlives
// Receive's, and:
//
//  1. When Receive's context ends, nothing new runs, and what would be
//     nacked (the queued deliveries, those that arrive meanwhile, a call
//     that fails while stopping, a flight that cannot land) is held
//     instead, unsettled, its lease still extended by the official
//     client. Running handlers finish within the drain timeout; their
//     acks go out as usual.
//  2. Once they have, and the acks have been sent (flushAcks), the
//     official Receive is cancelled with ShutdownBehaviorNackImmediately:
//     it closes its streams, then nacks every message still unsettled,
//     the held ones, in one request. The service sends them to the next
//     stream of the subscription, here or elsewhere.
//
// A held delivery is settled, and counted, as nacked when it is held; its
// Nack is called once the official Receive has returned (nackLeftovers),
// for the official client's books, and is not sent again.

// NackTimeout bounds the official client's nack of what is left at
// shutdown.
const NackTimeout = 30 * time.Second

// ackFlush is how long the acks handed to the official client may wait to
// be sent: it sends them every 100 ms, and drops those still pending when
// its streams close. Waiting two and a half intervals since the last ack
// lets it send them unless one of its requests hangs for longer.
const ackFlush = 250 * time.Millisecond

// ending is a Receive's shutdown state.
type ending struct {
	born    time.Time    // when the Receive began; set once
	lastAck atomic.Int64 // when the last ack was handed over, as time since born

	mu     sync.Mutex
	closed bool              // the official Receive has returned: nothing more is held
	held   []*pubsub.Message // deliveries to nack; guarded by mu
	// began is when the shutdown began; late ends shutdownGrace after
	// its drain timeout, and every wait for the server during the
	// shutdown gives up then (see ShutdownBound). Set once by begin,
	// under mu; cancelLate is called by end.
	began      time.Time
	late       context.Context
	cancelLate context.CancelFunc
	// cut is set, under mu, when the shutdown stopped waiting for the
	// official Receive.
	cut bool
}

// ShutdownBound is how long a Receive, or the Close of a push endpoint,
// may take past the drain timeout once its context ends, whatever the
// server does (S7): subscriber.ShutdownBound, whose doc says what it
// covers.
const ShutdownBound = 2 * time.Second

// shutdownGrace is the part of ShutdownBound the shutdown waits for the
// server after the drain timeout.
const shutdownGrace = 1500 * time.Millisecond

// begin starts the shutdown's clock.
func (e *ending) begin(drain time.Duration) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.late == nil {
		e.began = time.Now()
		e.late, e.cancelLate = context.WithTimeout(context.Background(), drain+shutdownGrace)
	}
}

// Deadline returns a context that ends when the shutdown's waits for the
// server must give up, and never ends before the shutdown began.
func (e *ending) Deadline() context.Context {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.late == nil {
		return context.Background()
	}
	return e.late
}

// left returns how long the shutdown may still wait for the server, 0
// once its time is up.
func (e *ending) left() time.Duration {
	d, ok := e.Deadline().Deadline()
	if !ok {
		return 0
	}
	return max(time.Until(d), 0)
}

// DrainEnd returns when the drain timeout ends: d after the shutdown
// began.
func (e *ending) DrainEnd(d time.Duration) time.Time {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.began.Add(d)
}

// end releases the shutdown's clock, once Receive returns.
func (e *ending) end() {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.cancelLate != nil {
		e.cancelLate()
	}
}

// acked records that an ack was handed to the official client now.
func (e *ending) acked() { e.lastAck.Store(int64(time.Since(e.born))) }

// hold keeps the deliveries of j, which the shutdown nacks, unsettled
// until the streams are closed, and reports whether it did. j is settled,
// and counted, as nacked.
func (e *ending) hold(j *Job) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return false
	}
	e.held = append(e.held, j.stale...)
	e.held = append(e.held, j.Msg)
	return true
}

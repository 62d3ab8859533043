package subscriber

import (
	"errors"
	"runtime/debug"
	"time"
)

// The call path. Every handler call goes through call, whatever brought
// the message: a turn of a key's lane on the pull path (lane.go, which
// Replay's Receive also runs), a release of a parked key
// (park_release.go), or a push request (push.go). It applies, in this
// order, the rules every call obeys:
//
//  1. Shutdown (S7): once Receive is stopping, nothing starts.
//  2. The ID window (S6): a message processed in this Receive, or run by
//     a release of a park that has ended, is not run again.
//  3. The sequence check (S12): a stamped copy of a number processed
//     already is not run; a gap before the number is reported.
//  4. The handler call: a panic becomes a *PanicError, runtime.Goexit
//     ErrHandlerExited; a failed call is reported to WithErrorHandler.
//  5. The failure decision (S5): a failed call counts against
//     WithMaxAttempts, across deliveries, unless it is a RetryAfter;
//     the message fails for good when its attempts are spent or the
//     handler said Permanent, and is otherwise called again after a
//     backoff. Once Receive is stopping, a failed call is not retried.
//  6. Recording: a success is recorded as processed, by message ID and
//     by stamp, before it is settled, so that a delivery that comes back
//     after the ack is known.
//  7. Observation: the call's duration and outcome, and its log.
//  8. Settling, by the entry point, from a deferred call, so that a
//     handler that exits its goroutine still has its message settled
//     (S11).
//
// Entry points differ only in where deliveries come from, which a door
// hides, and in how it settles a decision: a lane acks, nacks, retries on
// a timer or applies the failure policy; a release records the message in
// the control log or stops; a push request answers with a status.

// A door is an entry point's side of the call path: it settles each
// decision the path reaches. settle is called once per call, on the
// calling goroutine, even when the handler exits it.
type door interface {
	settle(j *job, v decision)
}

// decisionKind is what the call path decided of one call.
type decisionKind uint8

const (
	ran           decisionKind = iota // the handler returned nil: processed (S4)
	skipped                           // not called: processed already (S6, S12)
	stopped                           // not called, or failed, while Receive stops (S7)
	retrying                          // failed: call again after delay (S5)
	failedForGood                     // failed for good: the failure policy applies (S5)
)

// A decision is what the call path made of one call of a job.
type decision struct {
	kind  decisionKind
	err   error         // the handler's error; nil unless retrying or failedForGood
	delay time.Duration // retrying: the wait before the next call
	took  time.Duration // the handler call's duration; 0 if not called
}

// call runs j through the call path and hands the decision to d. j.d is
// complete but for Attempt, which call sets from the attempts window.
func (r *receiver) call(j *job, d door) {
	v := decision{kind: failedForGood, err: ErrHandlerExited} // what runtime.Goexit leaves
	var began time.Time
	defer func() {
		switch {
		case !began.IsZero():
			v.took = time.Since(began)
			v = r.judge(j, v)
			r.obs.handled(j, v)
		case v.err != nil:
			// A callback (the gap handler's) exited the goroutine before
			// the call: judged as a failed call, so that it is retried.
			v = r.judge(j, v)
		}
		d.settle(j, v)
	}()
	if r.stopped() {
		v = decision{kind: stopped} // S7
		return
	}
	if r.processedBefore(j.d.ID) || r.copyOfProcessed(j) {
		v = decision{kind: skipped} // S6, S12
		return
	}
	j.d.Attempt = r.tries.prior(j.d.ID).calls + 1
	began = time.Now()
	v.err = r.invoke(j)
	if v.err != nil {
		r.reportError(j, v.err) // v is kept if this exits the goroutine
	}
}

// invoke calls the handler once, turning a panic into a *PanicError.
func (r *receiver) invoke(j *job) (err error) {
	defer func() {
		if v := recover(); v != nil {
			err = &PanicError{Value: v, Stack: debug.Stack()}
		}
	}()
	life := j.life
	if life == nil {
		life = r.handlerCtx
	}
	return r.h(handlerContext{Context: j.ctx, life: life}, &j.d)
}

// judge decides what becomes of a call that ended with v.err (S5), and
// records a success as processed (S6, S12) before the door settles it.
func (r *receiver) judge(j *job, v decision) decision {
	id := j.d.ID
	if v.err == nil {
		r.seen.add(id)
		r.processedStamp(j)
		if j.d.Attempt > 1 {
			r.tries.succeed(id)
		}
		return decision{kind: ran, took: v.took}
	}
	if r.stopped() {
		return decision{kind: stopped, err: v.err, took: v.took} // no retries once stopping (S7)
	}
	var later *RetryAfterError
	counted := !errors.As(v.err, &later)
	failures := r.tries.fail(id, j.d.Attempt, counted)
	v.kind, v.delay = retrying, r.backoff(failures)
	if later != nil {
		v.delay = later.Delay
	}
	if counted && (failures >= r.cfg.maxAttempts || errors.As(v.err, new(*PermanentError))) {
		v.kind = failedForGood
	}
	return v
}

// failedForGood counts j's message in Stats.Failed, the first time it
// fails for good: the doors call it when they apply the failure policy.
func (r *receiver) failedForGood(j *job) {
	if r.tries.giveUp(j.d.ID) {
		r.s.counts.failed.Add(1)
	}
}

// processedBefore reports whether the message id was processed already:
// in this Receive (S6), or, with parking, by the release of a park that
// has ended since (its ack may have been lost).
func (r *receiver) processedBefore(id string) bool {
	return r.seen.contains(id) || (r.park != nil && r.park.releasedLately(id))
}

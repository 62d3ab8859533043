package subscriber

import (
	"runtime/debug"
	"time"
)

// A turn is a lane's task in the worker pool: it runs the lane's oldest
// delivery. The pool runs it on the lane key's partition, so a key's
// turns never overlap, and it runs or drops each one exactly once.

// Run runs one turn of the lane.
func (l *lane) Run() {
	j := l.begin()
	if j == nil {
		return
	}
	// What a handler that calls runtime.Goexit leaves: the deferred end
	// still settles the message and moves the lane on (S11), then the
	// goroutine exits and the pool replaces it.
	res := result{err: ErrHandlerExited}
	defer func() { l.end(j, res) }()
	res = l.r.process(j)
	if res.err != nil {
		l.r.reportError(j, res.err) // res is kept if this exits the goroutine
	}
}

// Drop is called by the pool when it discards a turn before it ran, at
// shutdown: the lane's deliveries are nacked unrun (S7).
func (l *lane) Drop() {
	var fx effects
	l.sh.mu.Lock()
	l.active = false
	l.drain(&fx, outShutdown)
	l.release()
	l.sh.mu.Unlock()
	l.r.apply(l, &fx)
}

// begin takes the lane's oldest delivery to run it, or returns nil when
// there is nothing to run now: the lane is shutting down, or its head is
// not due yet.
func (l *lane) begin() *job {
	r := l.r
	var fx effects
	l.sh.mu.Lock()
	defer func() {
		l.sh.mu.Unlock()
		r.apply(l, &fx)
	}()
	if r.stopped() {
		l.active = false
		l.drain(&fx, outShutdown)
		l.release()
		return nil
	}
	j, ok := l.queue.Pop()
	if !ok {
		l.active = false
		l.release()
		return nil
	}
	now := time.Now()
	if now.Before(j.notBefore) {
		// A message that failed for good on an earlier delivery waits
		// out its backoff before its next call.
		l.queue.PushFront(j)
		l.wait(j.notBefore.Sub(now), now)
		return nil
	}
	l.running, l.busySince = j, now
	j.d.Attempt = r.tries.prior(j.d.ID).calls + 1
	j.d.DeliveryAttempt = j.deliveryAttempt()
	return j
}

// result is the outcome of one turn's processing.
type result struct {
	dedup bool  // the message was processed already: not called (S6)
	err   error // the handler's error, nil on success
}

// process calls the handler for j, unless j's message was processed while
// j waited (S6), or j is a copy of a message processed already under
// another ID (see sequence.go).
func (r *receiver) process(j *job) result {
	if r.seen.contains(j.d.ID) || r.copyOfProcessed(j) {
		return result{dedup: true}
	}
	return result{err: r.call(j)}
}

// call runs the handler once, turning a panic into a *PanicError.
func (r *receiver) call(j *job) (err error) {
	defer func() {
		if v := recover(); v != nil {
			err = &PanicError{Value: v, Stack: debug.Stack()}
		}
	}()
	return r.h(handlerContext{Context: j.ctx, life: r.handlerCtx}, &j.d)
}

// end settles the turn's job by its result and moves the lane on.
func (l *lane) end(j *job, res result) {
	r := l.r
	now := time.Now()
	took := now.Sub(l.busySince) // set by begin, on this goroutine
	r.obs.handled(j, took, res)  // before the lane moves on: j is still this turn's
	if res.err == nil && !res.dedup {
		// Before the ack, so that a delivery of the message that comes
		// back after it is known as processed (S6).
		r.seen.add(j.d.ID)
		r.processedStamp(j)
	}
	var fx effects
	l.sh.mu.Lock()
	l.running = nil
	if !res.dedup {
		l.pace = ewma(l.pace, took)
		l.stats.ran(took)
	}
	switch {
	case res.dedup:
		fx.add(j, outDeduplicated)
	case res.err == nil:
		fx.add(j, outAcked) // S4: only after the handler succeeded
		if t := l.trouble; t != nil && t.id == j.d.ID {
			r.tries.succeed(j.d.ID)
			l.endTrouble(&fx, ReasonSucceeded, now)
		}
	case r.stopped():
		fx.add(j, outShutdown) // no retries once shutting down (S7)
	default:
		l.failed(j, res.err, now, &fx)
	}
	l.next(&fx)
	l.sh.mu.Unlock()
	r.apply(l, &fx)
}

// next decides whether the lane needs another turn now, after a turn or a
// timer. The shard's mutex must be held.
func (l *lane) next(fx *effects) {
	switch {
	case l.running != nil || l.retry != nil || l.pk.busy():
		// A turn runs, or a retry, the barrier or a flight is pending: it
		// will call next again.
		return
	case l.r.stopped():
		l.drain(fx, outShutdown)
		l.active = false
	case l.trouble != nil && l.trouble.held:
		// Deliveries kept while the key is held wait for the failed
		// message to come back.
		l.active = false
	case l.queue.Len() > 0 && l.r.park != nil && l.r.park.divert(l):
		// Parking holds the deliveries for the barrier, or moves them to
		// the parking topic (park.go).
	case l.queue.Len() > 0:
		l.active = true
		fx.turn = true
	default:
		l.active = false
	}
	l.release()
}

// drain takes every queued delivery out of the lane to be nacked with out,
// and stops its timers, at shutdown. The shard's mutex must be held.
func (l *lane) drain(fx *effects, out outcome) {
	for j, ok := l.queue.Pop(); ok; j, ok = l.queue.Pop() {
		fx.add(j, out)
	}
	if l.r.clock.stop(l.retry) {
		l.retry, l.active = nil, false // no turn will come
	}
	if t := l.trouble; t != nil && l.r.clock.stop(t.lapse) {
		t.lapse = nil
	}
	l.closeGap()
}

// wait makes the lane's head wait d for its next attempt, holding no
// worker (S5): the lane stays active, so that nothing else submits a turn,
// until the timer submits one. The shard's mutex must be held.
func (l *lane) wait(d time.Duration, now time.Time) {
	l.active = true
	if t := l.trouble; t != nil {
		t.retryAt = now.Add(d)
	}
	l.retry = l.r.clock.after(d, l.due)
}

// due is the retry timer's function: the head's next attempt is due.
func (l *lane) due() {
	var fx effects
	l.sh.mu.Lock()
	l.retry = nil
	l.next(&fx)
	l.sh.mu.Unlock()
	l.r.apply(l, &fx)
}

// ewma folds d into the moving average avg, a quarter at a time; the first
// sample is taken as it is.
func ewma(avg, d time.Duration) time.Duration {
	if avg == 0 {
		return d
	}
	return avg + (d-avg)/4
}

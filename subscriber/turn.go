package subscriber

import "time"

// A turn is a lane's task in the worker pool: it runs the lane's oldest
// delivery. The pool runs it on the lane key's partition, so a key's
// turns never overlap, and it runs or drops each one exactly once.

// Run runs one turn of the lane: its oldest delivery goes through the
// call path (call.go), and the lane settles the decision (settle).
func (l *lane) Run() {
	if j := l.begin(); j != nil {
		l.r.call(j, l)
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
	j.d.DeliveryAttempt = j.deliveryAttempt()
	return j
}

// settle is the pull path's door: it settles the decision on the turn's
// job and moves the lane on. An ack comes only after the handler succeeded
// (S4); a failure is retried on a timer or meets the failure policy
// (failure.go); once Receive is stopping, the job is nacked (S7).
func (l *lane) settle(j *job, v decision) {
	r := l.r
	now := time.Now()
	var fx effects
	l.sh.mu.Lock()
	l.running = nil
	if v.took > 0 {
		l.pace = ewma(l.pace, v.took)
		l.stats.ran(v.took)
	}
	switch v.kind {
	case skipped:
		fx.add(j, outDeduplicated)
	case ran:
		fx.add(j, outAcked)
		if t := l.trouble; t != nil && t.id == j.d.ID {
			l.endTrouble(&fx, ReasonSucceeded, now)
		}
	case stopped:
		fx.add(j, outShutdown)
	default:
		l.failed(j, v, now, &fx)
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

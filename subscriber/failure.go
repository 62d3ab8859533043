package subscriber

import "time"

// A failed handler call is retried after a backoff, on the same delivery,
// while the key waits without holding a worker (S5). The message fails
// for good when the handler says so with [Permanent], or when its failed
// calls, counted across its deliveries, reach [WithMaxAttempts]. The
// failure policy then applies: on an ordered subscription the message is
// nacked together with its key's local tail, unrun, and the key is held
// until the service brings the message back; elsewhere the message alone
// is nacked. Each later delivery of a message that failed for good gets
// one call, after the backoff its failures have reached.

// failed handles a failed handler call of j, which the call path judged
// in v: to be retried after v.delay, or failed for good. The shard's
// mutex must be held.
func (l *lane) failed(j *job, v decision, now time.Time, fx *effects) {
	r := l.r
	id, err := j.d.ID, v.err
	t := l.trouble
	if t == nil || t.id != id {
		t = &trouble{id: id, since: now}
		l.trouble = t
	}
	t.attempt, t.err = j.d.Attempt, err
	forGood := v.kind == failedForGood

	if j.redelivered {
		// The service sent the message again while this call ran, so
		// this delivery is stale (its lease ran out, or it was part of a
		// redelivered tail). The newest delivery gets a call of its own
		// rather than being nacked unrun: nacking it could make the
		// service dead-letter a message this client never tried again.
		for _, m := range j.stale {
			m.Nack()
		}
		j.stale, j.redelivered = nil, false
		forGood = false
	}
	if !forGood {
		r.s.counts.retried.Add(1)
		l.queue.PushFront(j)
		l.wait(v.delay, now)
		return
	}

	j.err = err // for the log of its failure
	r.failedForGood(j)
	if r.park != nil && l.key != "" {
		r.park.park(l, j, err) // park.go: the key parks instead of being held
		return
	}
	fx.add(j, outFailed)
	deadLettered := r.deadLettered(j)
	if deadLettered {
		r.s.counts.deadLettered.Add(1)
	}
	if l.key == "" || !r.s.ordered {
		// Nothing to keep in order behind it (S8).
		l.trouble = nil
		return
	}
	if deadLettered {
		// The service forwards the message instead of sending it back,
		// and goes on with the key: waiting for it would hold the key
		// for ever, and the tail may run.
		l.endTrouble(fx, ReasonDeadLettered, now)
		return
	}
	// S5: the failed message first, then its tail, so that the service
	// sends them back in order.
	l.nackTail(fx)
	// A room gap (S10) waits for a later message: the failed one now comes
	// back first, with everything after it, and the gap would nack the
	// messages between the two and let the later one run before them.
	l.closeGap()
	t.held, t.retryAt = true, time.Time{}
	t.lapse = r.clock.after(r.cfg.redeliveryWait, func() { l.lapsed(t) })
	if !t.reported {
		t.reported = true
		fx.events = append(fx.events, KeyEvent{Kind: KeyHeld, HeldKey: l.heldKey(), At: now})
	}
}

// nackTail nacks the key's queued deliveries unrun, except those on their
// last delivery before dead-lettering: a nack would send those to the
// dead-letter topic without their handler ever running, so they wait here
// for the failed message instead. The shard's mutex must be held.
func (l *lane) nackTail(fx *effects) {
	tail := l.queue.RemoveFunc(func(q *job) bool { return !l.r.deadLettered(q) }, nil)
	for _, q := range tail {
		fx.add(q, outTail)
	}
}

// back is called when the failed message of a held key comes back as j:
// it goes in front of whatever waits, and the hold ends. The shard's mutex
// must be held.
func (l *lane) back(j *job) {
	t := l.trouble
	if l.r.clock.stop(t.lapse) {
		t.lapse = nil
	}
	t.held = false
	l.queue.PushFront(j)
}

// endTrouble ends the lane's trouble, telling the user if a hold was
// reported. The shard's mutex must be held.
func (l *lane) endTrouble(fx *effects, reason string, now time.Time) {
	t := l.trouble
	if l.r.clock.stop(t.lapse) {
		t.lapse = nil
	}
	if t.reported {
		fx.events = append(fx.events, KeyEvent{Kind: KeyReleased, HeldKey: l.heldKey(), Reason: reason, At: now})
	}
	l.trouble = nil
}

// lapsed is the lapse timer's function: the failed message t did not come
// back within WithRedeliveryWait, so the service must have sent it to
// another client, and the key goes on here.
func (l *lane) lapsed(t *trouble) {
	var fx effects
	l.sh.mu.Lock()
	if l.trouble == t && t.held {
		t.lapse = nil
		l.endTrouble(&fx, ReasonLapsed, time.Now())
		l.next(&fx)
	}
	l.sh.mu.Unlock()
	l.r.apply(l, &fx)
}

// deadLettered reports whether the service will forward j's message to
// the dead-letter topic rather than deliver it again if j is nacked now.
func (r *receiver) deadLettered(j *job) bool {
	return r.s.deadLetterAttempts > 0 && j.deliveryAttempt() >= r.s.deadLetterAttempts
}

// backoff is the wait before the next call of a message after its
// failures-th counted failure: WithBackoff's min, doubling up to its max.
func (r *receiver) backoff(failures int) time.Duration {
	d := r.cfg.minBackoff
	for i := 1; i < failures && d < r.cfg.maxBackoff; i++ {
		d *= 2
	}
	return min(d, r.cfg.maxBackoff)
}

// reportError tells the WithErrorHandler callback about a failed call. A
// panic in the callback is recovered and logged: it must not leave the
// message unsettled (S11).
func (r *receiver) reportError(j *job, err error) {
	if r.cfg.onError == nil {
		return
	}
	defer r.recoverCallback("error handler")
	r.cfg.onError(&j.d, err)
}

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

// note records v, the call path's verdict on j, in the key's trouble: the
// held-key record that HeldKeys and Stats.Held read, whatever the door
// (the pull path's settle, and push's, lane_push.go). A failure starts or
// updates it; a failure for good that holds the key marks it held and
// tells KeyHeld once; the message's success, or the service giving up on
// it, ends it. The shard's mutex must be held.
func (l *lane) note(j *job, v verdict, now time.Time, fx *effects) {
	t := l.trouble
	switch {
	case v.kind == ran:
		if t != nil && t.id == j.d.ID {
			l.endTrouble(fx, ReasonSucceeded, now)
		}
		return
	case v.kind == copied || v.kind == stopped:
		return
	case t == nil || t.id != j.d.ID:
		t = &trouble{id: j.d.ID, since: now}
		l.trouble = t
	}
	t.attempt, t.err, t.retryAt = j.d.Attempt, v.err, time.Time{}
	switch v.kind {
	case retrying:
		t.retryAt = now.Add(v.delay)
	case parkKey:
		l.endTrouble(nil, "", now) // parking tells of the park (KeyParked)
	case forsaken:
		if v.deadLettered && l.key != "" && l.r.s.ordered {
			// The service forwards the message instead of sending it
			// back, and goes on with the key.
			l.endTrouble(fx, ReasonDeadLettered, now)
		} else {
			l.trouble = nil // nothing to keep in order behind it (S8)
		}
	case holdKey:
		t.held = true
		t.lapse = l.r.clock.after(l.r.cfg.redeliveryWait, func() { l.lapsed(t) })
		if !t.reported {
			t.reported = true
			fx.events = append(fx.events, KeyEvent{Kind: KeyHeld, HeldKey: l.heldKey(), At: now})
		}
	}
}

// retryLater puts j, whose call failed, back at the head of the lane for
// its next call after d, the key waiting without a worker (S5). If the
// service sent the message again while the call ran, the older
// deliveries are nacked: the newest gets the call. The shard's mutex must
// be held.
func (l *lane) retryLater(j *job, d time.Duration, now time.Time) {
	j.dropStale()
	l.queue.PushFront(j)
	l.wait(d, now)
}

// hold is the failure policy of an ordered key without parking: the
// failed message is nacked first, then its tail, so that the service
// sends them back in order, and the key is held until the message comes
// back (note marked it held). The shard's mutex must be held.
func (l *lane) hold(j *job, fx *effects) {
	fx.add(j, outFailed)
	l.nackTail(fx)
	// A room gap (S10) waits for a later message: the failed one now comes
	// back first, with everything after it, and the gap would nack the
	// messages between the two and let the later one run before them.
	l.closeRoomGap()
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
// reported, unless fx is nil. The shard's mutex must be held.
func (l *lane) endTrouble(fx *effects, reason string, now time.Time) {
	t := l.trouble
	if l.r.clock.stop(t.lapse) {
		t.lapse = nil
	}
	if t.reported && fx != nil {
		fx.events = append(fx.events, KeyEvent{Kind: KeyReleased, HeldKey: l.heldKey(), Reason: reason, At: now})
	}
	l.trouble = nil
}

// lapsed is the lapse timer's function: the failed message t did not come
// back within WithRedeliveryWait, so the service must have sent it to
// another client, and the key goes on here.
func (l *lane) lapsed(t *trouble) {
	l.update(func(now time.Time, fx *effects) {
		if l.trouble == t && t.held {
			t.lapse = nil
			l.endTrouble(fx, ReasonLapsed, now)
		}
	})
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

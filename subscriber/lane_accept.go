package subscriber

import "time"

// accept decides what becomes of j, a new delivery on l: queued, joined to
// a delivery of the same message already here, or nacked unrun. The
// shard's mutex must be held.
func (l *lane) accept(j *job, now time.Time) outcome {
	r := l.r
	if r.stopped() {
		return outShutdown // S7
	}
	id := j.d.ID
	if l.running != nil && l.running.d.ID == id {
		l.running.join(j.msg, true)
		return outJoined
	}
	for i := 0; i < l.queue.Len(); i++ {
		if q := l.queue.At(i); q.d.ID == id {
			q.join(j.msg, false)
			return outJoined
		}
	}
	j.fresh = l.holdsNothing()
	if r.park != nil && l.key != "" {
		r.park.accept(l) // lane_park.go: the barrier
	}
	if prior := r.tries.prior(id); prior.failures >= r.cfg.maxAttempts {
		// It failed for good on an earlier delivery: one call per
		// delivery, after its backoff.
		j.notBefore = now.Add(r.backoff(prior.failures))
	}
	if t := l.trouble; t != nil && t.held {
		out := l.returning(j) // lane_failure.go: S5, and the order on the way back
		if out == outQueued {
			r.take(j)
		}
		return out
	} else if l.roomGap != "" && id != l.roomGap {
		return outRoom // S10: an earlier message of the key was sent back
	} else if l.closeRoomGap(); !r.room.admit(l, j, now) {
		l.openRoomGap(id)
		return outRoom // S10
	}
	l.queue.Push(j)
	r.take(j)
	return outQueued
}

// holdsNothing reports whether the lane holds nothing of its key: no
// delivery queued or running, no retry, hold or flight. The shard's mutex
// must be held.
func (l *lane) holdsNothing() bool {
	return !l.pk.flight && l.running == nil && l.retry == nil && l.queue.Len() == 0 && l.trouble == nil
}

package subscriber

import (
	"time"

	"github.com/keyorder/keyorder/subscriber/internal/engine"
)

// accept decides what becomes of j, a new delivery on l: queued, joined to
// a delivery of the same message already here, or nacked unrun. The
// shard's mutex must be held.
func (l *lane) accept(j *job, now time.Time) engine.Outcome {
	r := l.r
	if r.stopped() {
		return engine.Shutdown // S7
	}
	id := j.d.ID
	if l.running != nil && l.running.d.ID == id {
		l.running.join(j.msg, true)
		return engine.Joined
	}
	for i := 0; i < l.queue.Len(); i++ {
		if q := l.queue.At(i); q.d.ID == id {
			q.join(j.msg, false)
			return engine.Joined
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
		if out == engine.Queued {
			r.take(j)
		}
		return out
	} else if l.roomGap != "" && id != l.roomGap {
		return engine.Room // S10: an earlier message of the key was sent back
	} else if l.closeRoomGap(); !r.room.admit(l, j, now) {
		l.openRoomGap(id)
		return engine.Room // S10
	}
	l.place(j, now)
	r.take(j)
	return engine.Queued
}

// place queues j, a new delivery, at the back of the lane, or, on a
// server that may redeliver out of order, if it is stamped, just before
// the first delivery of its producer queued with a higher number: a
// producer numbers a key's messages in the order it publishes them, so
// those are later messages that arrived first (S3). Google's emulator
// sends back what was nacked or expired one by one, in nack order, and a
// later one can come first. The service delivers a key's messages in
// order, and a lower number that arrives later is a copy stored later:
// there the back is the place, and a fresh Receive that got the later
// number first takes the copy for one (S12) rather than running it first.
//
// A delivery placed at the head, in front of one waiting for its next
// attempt, runs now: that one keeps its wait (notBefore), and a wait that
// is not a message's own (a park's backoff) is left alone. The shard's
// mutex must be held.
func (l *lane) place(j *job, now time.Time) {
	i := l.queue.Len()
	if ordersBySeq(l, j) {
		// The queue holds each producer's deliveries in number order, so
		// the search from the back ends at the first of them below j.
		for k := l.queue.Len() - 1; k >= 0; k-- {
			if q := l.queue.At(k); q.d.Producer == j.d.Producer {
				if q.d.Seq < j.d.Seq {
					break
				}
				i = k
			}
		}
	}
	if i == 0 && l.queue.Len() > 0 && l.retry != nil && !l.turn && l.pk.failed == nil &&
		now.Before(l.queue.At(0).notBefore) && l.r.clock.stop(l.retry) {
		l.retry, l.active = nil, false // the caller's next submits a turn
	}
	l.queue.Insert(i, j)
}

// putBack returns j, which ran or was taken out of the lane, to the head
// of the lane, behind any delivery of its producer queued with a lower
// number (place). The shard's mutex must be held.
func (l *lane) putBack(j *job) {
	i := 0
	if ordersBySeq(l, j) {
		for k := 0; k < l.queue.Len(); k++ {
			if q := l.queue.At(k); q.d.Producer == j.d.Producer {
				if q.d.Seq > j.d.Seq {
					break
				}
				i = k + 1
			}
		}
	}
	l.queue.Insert(i, j)
}

// ordersBySeq reports whether j's place in l follows its stamp: a keyed
// delivery of an ordered subscription, stamped by its producer, from a
// server that may redeliver out of order.
func ordersBySeq(l *lane, j *job) bool {
	return l.r.anyOrder && l.r.s.ordered && l.key != "" && j.d.Producer != "" && j.d.Seq != 0
}

// holdsNothing reports whether the lane holds nothing of its key: no
// delivery queued or running, no retry, hold or flight. The shard's mutex
// must be held.
func (l *lane) holdsNothing() bool {
	return !l.pk.flight && l.running == nil && l.retry == nil && l.queue.Len() == 0 && l.trouble == nil
}

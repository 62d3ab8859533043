package engine

import (
	"context"
	"errors"
	"time"

	"github.com/keyorder/keyorder/internal/backoff"
)

// A failed handler call is retried after a backoff, on the same delivery,
// while the key waits without holding a worker (S5). The message fails
// for good when the handler says so with [Permanent], or when its failed
// calls, counted across its deliveries, reach [WithMaxAttempts]. The
// failure policy then applies: on an ordered subscription the message is
// nacked together with its key's local tail, unrun, and the key is held
// until the service brings the message back; elsewhere the message alone
// is nacked. Each later delivery of a message that failed for good gets
// one call, after the backoff its failures have reached.

// trouble is a lane's failing message: the one no later message of the key
// may overtake (S5). It lasts from the message's first failure to its
// success, or until the service gives up on it.
type trouble struct {
	id      string
	since   time.Time
	attempt int   // handler calls so far
	err     error // the last one's
	retryAt time.Time
	// held is set while the message is away: the failure policy nacked
	// it, and the key waits for the service to bring it back, until
	// lapse fires.
	held  bool
	lapse *time.Timer
	// reported is set once KeyHeld has been emitted, so that KeyReleased
	// is due when the trouble ends.
	reported bool
	// way is the way back of what the hold sent back, while held.
	way *comeback
}

// retryLater puts j, whose call failed, back at the head of the lane for
// its next call after d, the key waiting without a worker (S5), behind
// any earlier message of its producer that arrived while it ran (place),
// which runs first. If the service sent the message again while the call
// ran, the older deliveries are nacked: the newest gets the call. The
// shard's mutex must be held.
func (l *Lane) retryLater(j *Job, d time.Duration, now time.Time) {
	j.dropStale()
	j.notBefore = now.Add(d)
	l.putBack(j)
	if l.Queue.At(0) == j {
		l.wait(d, now)
	} // else an earlier message of its producer came meanwhile, and runs first
}

// hold is the failure policy of an ordered key without parking: the
// failed message is nacked first, then its tail, so that the service
// sends them back in order, and the key is held until the message comes
// back (note marked it held). The shard's mutex must be held.
func (l *Lane) hold(j *Job, fx *Effects) {
	fx.Add(j, Failed)
	way := newComeback(j.D.ID)
	l.nackTail(fx, way)
	l.trouble.way = way
	// A room gap (S10) waits for a later message: the failed one now comes
	// back first, with everything after it, and the gap would nack the
	// messages between the two and let the later one run before them.
	l.closeRoomGap()
}

// nackTail nacks the key's queued deliveries unrun, in order, for the
// service to send back after the failed message, and keeps their places
// in way. Those on their last delivery before dead-lettering are kept
// rather than nacked: a nack would send them to the dead-letter topic
// without their handler ever running, so they wait in their place for the
// failed message instead. The shard's mutex must be held.
func (l *Lane) nackTail(fx *Effects, way *comeback) {
	for q, ok := l.Queue.Pop(); ok; q, ok = l.Queue.Pop() {
		if l.r.DeadLettered(q) {
			way.keep(q)
			continue
		}
		fx.Add(q, Tail)
		way.send(q.D.ID)
	}
}

// returning is accept's part while the key is held: j is a delivery of a
// message the hold sent back, which takes its place on the way back, or
// one joining it there; or a later message, kept behind them if it is on
// its last delivery before dead-lettering, and otherwise nacked (S5).
// Once every message the hold sent back has come back, the hold's wait is
// over.
//
// A later message nacked here gets no place on the way back: the order in
// which such deliveries arrive need not be the key's when the server has
// several passes of the key's messages in flight (a room nack's, then the
// hold's), and placing them by arrival could run a later message first.
// The service sends them again after the failed message and its tail, in
// order; Google's emulator sends them in the nack request's order, which
// this cannot mend (DESIGN.md, Lanes). The shard's mutex must be held.
func (l *Lane) returning(j *Job) Outcome {
	way := l.trouble.way
	switch out := way.back(j); {
	case out != Held:
		if way.away == 0 {
			l.comeBack()
		}
		return out
	case l.r.DeadLettered(j):
		way.keep(j)
		return Queued
	default:
		return Held
	}
}

// comeBack ends a hold's wait: the messages it sent back have all come
// back, and go to the head of the lane in the order this process first
// received them, the failed one first, whatever order the server sent
// them back in. The shard's mutex must be held.
func (l *Lane) comeBack() {
	t := l.trouble
	if l.r.clock.stop(t.lapse) {
		t.lapse = nil
	}
	t.held = false
	l.requeue()
}

// requeue puts what the hold's way back holds at the head of the lane, in
// order. The shard's mutex must be held.
func (l *Lane) requeue() {
	t := l.trouble
	if t.way == nil {
		return
	}
	for i := len(t.way.slots) - 1; i >= 0; i-- {
		if j := t.way.slots[i]; j != nil {
			l.putBack(j)
		}
	}
	t.way = nil
}

// endTrouble ends the lane's trouble, telling the user if a hold was
// reported, unless fx is nil. The shard's mutex must be held.
func (l *Lane) endTrouble(fx *Effects, reason string, now time.Time) {
	t := l.trouble
	if l.r.clock.stop(t.lapse) {
		t.lapse = nil
	}
	l.requeue() // what came back runs, in order
	if t.reported && fx != nil {
		fx.events = append(fx.events, KeyEvent{Kind: KeyReleased, HeldKey: l.heldKey(), Reason: reason, At: now})
	}
	l.trouble = nil
}

// lapsed is the lapse timer's function: the failed message t, or one sent
// back after it, did not come back within WithRedeliveryWait, so the
// service must have sent it to another client, and the key goes on here
// with what came back, in order. The key showed as held all the while.
func (l *Lane) lapsed(t *trouble) {
	l.Update(func(now time.Time) (fx Effects) {
		if l.trouble == t && t.held {
			t.lapse = nil
			l.endTrouble(&fx, ReasonLapsed, now)
		}
		return fx
	})
}

// partition returns the partition of l's key, computing it once. The
// shard's mutex must be held.
func (l *Lane) partition() int {
	if l.stats.part == 0 {
		l.stats.part = int32(l.r.pool.Partition(l.Key)) + 1
	}
	return int(l.stats.part) - 1
}

// oldest returns when the oldest delivery the lane holds arrived, zero if
// it holds none. Deliveries queue in arrival order, and a running one was
// the head before, so a healthy lane's oldest is the running job, or else
// the head. Only a held key's failed message, coming back, goes in front
// of older deliveries: those kept while it was away (nackTail), the oldest
// of which is then second, or running. One job is read in the common case:
// a Stats of many keys costs a cache miss per job it reads. The shard's
// mutex must be held.
func (l *Lane) oldest() time.Time {
	if l.trouble == nil {
		switch {
		case l.Running != nil:
			return l.Running.received
		case l.Queue.Len() > 0:
			return l.Queue.At(0).received
		}
		return time.Time{}
	}
	var t time.Time
	older := func(j *Job) {
		if t.IsZero() || j.received.Before(t) {
			t = j.received
		}
	}
	if l.Running != nil {
		older(l.Running)
	}
	for i := 0; i < min(2, l.Queue.Len()); i++ {
		older(l.Queue.At(i))
	}
	return t
}

// stuck reports whether l's backlog is not draining: its oldest message is
// failing, or the backlog would take more than drainLimit at its pace. The
// shard's mutex must be held.
func (l *Lane) stuck(now time.Time) bool {
	if l.trouble != nil {
		return true
	}
	per := l.pace
	if l.Running != nil {
		per = max(per, now.Sub(l.busySince))
	}
	return time.Duration(l.Queue.Len())*per > drainLimit
}

// shed nacks l's queued deliveries past the backlog if l is stuck. The
// shard's mutex must be held.
func (l *Lane) shed(now time.Time, fx *Effects) {
	if l.Queue.Len() <= l.r.room.perKey || !l.stuck(now) {
		return
	}
	tail := l.Queue.Truncate(l.r.room.perKey, nil)
	l.openRoomGap(tail[0].D.ID) // the oldest nacked comes back first
	for _, j := range tail {
		fx.Add(j, Room)
	}
}

// openRoomGap nacks id for room: the key's later deliveries are nacked until
// it comes back (S10). The shard's mutex must be held.
func (l *Lane) openRoomGap(id string) {
	if l.roomGap == id {
		return
	}
	l.closeRoomGap()
	l.roomGap = id
	l.roomGapEnd = l.r.clock.after(l.r.Cfg.RedeliveryWait, func() {
		// Not update: the lane may have a turn in the pool, and next
		// would submit a second one.
		l.sh.mu.Lock()
		if l.roomGap == id {
			l.roomGap, l.roomGapEnd = "", nil
			l.release()
		}
		l.sh.mu.Unlock()
	})
}

// fenceArrival is called for a new keyed delivery on l, before the lane's
// other rules: a delivery that arrives at a lane holding nothing of its
// key waits for the barrier. The shard's mutex must be held.
func (l *Lane) fenceArrival(now time.Time) {
	if pk := &l.pk; !pk.flight && l.Running == nil && l.Retry == nil && l.Queue.Len() == 0 {
		// Nothing of the key here: another process may have had it, and
		// parked it, before the service sent the delivery. A fence taken
		// for an earlier delivery that did not stay (one nacked for room)
		// is too early for it; none is needed while the view is fresh.
		pk.fence = l.r.park.Fence(now)
	}
}

// divert is called by next for a lane with queued deliveries and nothing
// running: it holds them for the barrier, or sends them on a flight to
// the parking topic, and reports whether it did. The shard's mutex must be
// held.
func (l *Lane) divert() bool {
	pk, park := &l.pk, l.r.park
	if l.Key == "" {
		return false
	}
	parkID := park.ParkID(l.Key)
	if parkID == "" && pk.failed == nil {
		if pk.fence != 0 {
			if park.Wait(pk.fence, l.unfence) {
				pk.waiting, l.Active = true, true
				return true
			}
			pk.fence = 0
		}
		return false
	}
	// A flight needs no barrier: the log's verdict on it comes after every
	// event published before it, so if it is refused, the view is up to
	// date when its deliveries go back to run.
	pk.fence = 0
	var jobs []*Job
	for j, ok := l.Queue.Pop(); ok; j, ok = l.Queue.Pop() {
		jobs = append(jobs, j)
	}
	pk.flight, l.Active = true, true
	park.Fly(l.Key, jobs, parkID, pk.failed, func(parked bool, err error) { l.land(jobs, parked, err) })
	return true
}

// park is the failure policy with parking: j, which failed for good with
// err, goes back to the head of its lane, and the lane's next flight parks
// the key. The shard's mutex must be held.
func (l *Lane) park(j *Job, err error) {
	l.pk.failed = CauseOf(j, err)
	l.putBack(j)
}

// unfence moves the lane on once the barrier it waited for has passed.
func (l *Lane) unfence() {
	l.Update(func(time.Time) Effects { l.pk.waiting = false; return Effects{} })
}

// land ends the flight of jobs. Parked, they are acked. Otherwise they go
// back to the head of the lane, in order: refused by the log (the key was
// released meanwhile), they run or fly again as the view now says; after
// an error, the lane waits a backoff and flies again, holding the key
// here, so that nothing is lost or overtaken. At shutdown they are nacked.
func (l *Lane) land(jobs []*Job, parked bool, err error) {
	r := l.r
	l.Update(func(now time.Time) (fx Effects) {
		pk := &l.pk
		pk.flight = false
		switch {
		case parked:
			pk.failed, pk.tries = nil, 0
			r.Parked(&fx, jobs...)
		case r.Stopped():
			for _, j := range jobs {
				fx.Add(j, Shutdown)
			}
		default:
			for i := len(jobs) - 1; i >= 0; i-- {
				l.putBack(jobs[i])
			}
			if err != nil {
				// A publish failed, not a handler: the control log's
				// backoff, not WithBackoff's, which may be minutes.
				pk.tries++
				l.wait(backoff.Publish(pk.tries), now)
			}
		}
		return fx
	})
	if err != nil && !errors.Is(err, context.Canceled) {
		r.Obs.Log.Warn("keyorder/subscriber: could not park messages; will try again", "key", l.Key, "error", err)
	}
}

// heldKey describes the lane's trouble. The shard's mutex must be held.
func (l *Lane) heldKey() HeldKey {
	t := l.trouble
	k := HeldKey{
		Key: l.Key, MessageID: t.id, Since: t.since, Attempt: t.attempt, Err: t.err,
		Held: t.held, RetryAt: t.retryAt, Queued: l.Queue.Len(),
	}
	for i := 0; i < l.Queue.Len(); i++ {
		if l.Queue.At(i).D.ID == t.id {
			// The failed message itself, waiting for its retry: at the
			// head, or behind earlier messages of its producer (place).
			k.Queued--
			break
		}
	}
	if l.Running != nil && l.Running.D.ID != t.id {
		k.Queued++
	}
	if t.way != nil {
		k.Queued += t.way.held()
		if t.way.slots[0] != nil {
			k.Queued-- // the failed message itself, come back
		}
	}
	return k
}

// drain takes every queued delivery out of the lane to be nacked with out,
// and stops its timers, at shutdown. The shard's mutex must be held.
func (l *Lane) drain(fx *Effects, out Outcome) {
	for j, ok := l.Queue.Pop(); ok; j, ok = l.Queue.Pop() {
		fx.Add(j, out)
	}
	if l.r.clock.stop(l.Retry) {
		l.Retry, l.Active = nil, false // no turn will come
	}
	if t := l.trouble; t != nil {
		if l.r.clock.stop(t.lapse) {
			t.lapse = nil
		}
		if t.way != nil {
			for _, j := range t.way.slots {
				if j != nil {
					fx.Add(j, out)
				}
			}
			t.way = nil
		}
	}
	l.closeRoomGap()
}

// wait makes the lane's head wait d for its next attempt, holding no
// worker (S5): the lane stays active, so that nothing else submits a turn,
// until the timer submits one. The shard's mutex must be held.
func (l *Lane) wait(d time.Duration, now time.Time) {
	l.Active = true
	if t := l.trouble; t != nil {
		t.retryAt = now.Add(d)
	}
	l.Retry = l.r.clock.after(d, l.due)
}

// due is the retry timer's function: the head's next attempt is due.
func (l *Lane) due() {
	l.Update(func(time.Time) Effects { l.Retry = nil; return Effects{} })
}

// Drop is called by the pool when it discards a turn before it ran, at
// shutdown: the lane's deliveries are nacked unrun (S7).
func (l *Lane) Drop() {
	l.Update(func(_ time.Time) (fx Effects) {
		l.Active, l.turn = false, false
		l.drain(&fx, Shutdown)
		return fx
	})
}

// putBack returns j, which ran or was taken out of the lane, to the head
// of the lane, behind any delivery of its producer queued with a lower
// number (place). The shard's mutex must be held.
func (l *Lane) putBack(j *Job) {
	i := 0
	if ordersBySeq(l, j) {
		for k := 0; k < l.Queue.Len(); k++ {
			if q := l.Queue.At(k); q.D.Producer == j.D.Producer {
				if q.D.Seq > j.D.Seq {
					break
				}
				i = k + 1
			}
		}
	}
	l.Queue.Insert(i, j)
}

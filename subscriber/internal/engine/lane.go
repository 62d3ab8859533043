package engine

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/keyorder/keyorder/internal/fifo"
)

// A Lane is one key's state in a Receive. It runs the key's deliveries one
// at a time, in the order they arrived, or, where the server may
// redeliver out of order, a producer's stamped ones in number order
// (place), by submitting itself to the
// worker pool as a task, a turn, whenever it has a delivery to run and no
// turn queued or running and no retry pending (active). A turn runs one
// delivery.
//
// A lane is also the unit of failure (S5): while its oldest message waits
// for its next attempt, the lane has a timer and no turn, so it holds no
// worker, and the key's later deliveries wait behind the message. When the
// failure policy holds the key, the lane stays, with nothing queued, to
// turn away the key's deliveries until the failed message comes back.
//
// A message without a key gets a lane of its own, outside the map of keys,
// that lives as long as that one message.
//
// Its methods are in lane.go, a delivery's way through the lane
// (accepting it, its turn, settling its verdict, push's bookkeeping) with
// the lanes' map of keys, and in lane_failure.go, failure, room, parking,
// shutdown and what Stats reads (the census).
type Lane struct {
	r   *Engine // set when made
	sh  *laneShard
	Key string

	// queue holds the deliveries received and not started, oldest first;
	// the head may be a failed message waiting for its next attempt.
	Queue fifo.Queue[*Job]
	// running is the job whose handler is running, nil otherwise, and
	// busySince when its call began.
	Running   *Job
	busySince time.Time
	// pace is the recent duration of the key's handler calls, a moving
	// average; 0 before the first. Room uses it to tell a key that drains
	// from one that is stuck (S10).
	pace time.Duration
	// active is set while a turn is in the pool or running, or retry is
	// pending: then nothing else may submit a turn. turn is set while a
	// turn is in the pool and has not begun.
	Active bool
	turn   bool
	// retry fires when the head's next attempt is due.
	Retry *time.Timer
	// trouble is the key's failing message, nil while it is healthy.
	trouble *trouble
	// roomGap is the first delivery of the key nacked for room (S10). The
	// service sends it back before any later message of the key, so every
	// later delivery is nacked too until it comes back, or until
	// roomGapEnd fires after WithRedeliveryWait, in case it went to
	// another client. (A gap in a producer's sequence numbers is another
	// thing: sequence.go.)
	roomGap    string
	roomGapEnd *time.Timer

	// stats counts the key's calls while it has a lane, for Stats.
	stats laneStats
	// pk is the lane's part in parking (lane_park.go).
	pk laneParking
}

// release removes the lane from its shard once it holds nothing. The
// shard's mutex must be held.
func (l *Lane) release() {
	if l.Active || l.Running != nil || l.Queue.Len() > 0 || l.trouble != nil || l.roomGap != "" {
		return
	}
	if l.Key == "" {
		delete(l.sh.loose, l)
	} else if l.sh.keyed[l.Key] == l {
		delete(l.sh.keyed, l.Key)
	}
}

// A turn is a lane's task in the worker pool: it runs the lane's oldest
// delivery. The pool runs it on the lane key's partition, so a key's
// turns never overlap, and it runs or drops each one exactly once.

// Run runs one turn of the lane: its oldest delivery goes through the
// call path (call.go), and the lane settles the decision (settle).
func (l *Lane) Run() {
	if j := l.begin(); j != nil {
		l.r.Call(j, l)
	}
}

// Update is every change to a lane from outside a held shard mutex: f
// changes it under the mutex, next decides its next turn, and what they
// decided is applied once the mutex is released (apply). next releases a
// Lane left with nothing.
//
// f returns what it decided, rather than being handed a pointer to fill:
// a pointer passed to a function value escapes, and would cost every
// settlement an allocation.
func (l *Lane) Update(f func(now time.Time) Effects) {
	l.sh.mu.Lock()
	fx := f(time.Now())
	l.next(&fx)
	l.sh.mu.Unlock()
	l.r.apply(l, &fx)
}

// begin takes the lane's oldest delivery to run it, or returns nil when
// there is nothing to run now: the lane is shutting down, or its head is
// not due yet.
func (l *Lane) begin() *Job {
	r := l.r
	var fx Effects
	l.sh.mu.Lock()
	defer func() {
		l.sh.mu.Unlock()
		r.apply(l, &fx)
	}()
	l.turn = false
	if r.Stopped() {
		l.Active = false
		l.drain(&fx, Shutdown)
		l.release()
		return nil
	}
	j, ok := l.Queue.Pop()
	if !ok {
		l.Active = false
		l.release()
		return nil
	}
	now := time.Now()
	if now.Before(j.notBefore) {
		// A message that failed for good on an earlier delivery waits
		// out its backoff before its next call.
		l.Queue.PushFront(j)
		l.wait(j.notBefore.Sub(now), now)
		return nil
	}
	l.Running, l.busySince = j, now
	j.D.DeliveryAttempt = j.deliveryAttempt()
	return j
}

// Settle is the pull path's door: it delivers the call path's verdict on
// the turn's job and moves the lane on. A success or a copy is acked (S4,
// S6); a failure is called again after its delay, on a timer, or meets
// the failure policy the verdict names (lane_failure.go); once Receive is
// stopping, the job is nacked (S7).
func (l *Lane) Settle(j *Job, v Verdict) {
	l.Update(func(now time.Time) (fx Effects) {
		l.Running = nil
		if v.took > 0 {
			l.pace = ewma(l.pace, v.took)
			l.stats.ran(v.took)
		}
		l.note(j, v, now, &fx)
		switch v.Out {
		case Retried:
			l.retryLater(j, v.Delay, now)
		case Parked:
			l.park(j, v.Err) // lane_failure.go: the next flight parks the key
		case HoldKey:
			l.hold(j, &fx)
		default:
			fx.Add(j, v.Out) // acked, deduplicated, shutdown, failed
		}
		return fx
	})
}

// next decides whether the lane needs another turn now, after a turn or a
// timer. The shard's mutex must be held.
func (l *Lane) next(fx *Effects) {
	switch {
	case l.Running != nil || l.turn || l.Retry != nil || l.pk.busy():
		// A turn runs or waits in the pool, or a retry, the barrier or a
		// flight is pending: it will call next again.
		return
	case l.r.Stopped():
		l.drain(fx, Shutdown)
		l.Active = false
	case l.trouble != nil && l.trouble.held:
		// Deliveries kept while the key is held wait for the failed
		// message to come back.
		l.Active = false
	case l.Queue.Len() > 0 && l.r.park != nil && l.divert():
		// Parking holds the deliveries for the barrier, or moves them to
		// the parking topic (divert, lane_failure.go).
	case l.Queue.Len() > 0:
		l.Active, l.turn = true, true
		fx.turn = true
	default:
		l.Active = false
	}
	l.release()
}

// ewma folds d into the moving average avg, a quarter at a time; the first
// sample is taken as it is.
func ewma(avg, d time.Duration) time.Duration {
	if avg == 0 {
		return d
	}
	return avg + (d-avg)/4
}

// accept decides what becomes of j, a new delivery on l: queued, joined to
// a delivery of the same message already here, or nacked unrun. The
// shard's mutex must be held.
func (l *Lane) accept(j *Job, now time.Time) Outcome {
	r := l.r
	if r.Stopped() {
		return Shutdown // S7
	}
	id := j.D.ID
	if l.Running != nil && l.Running.D.ID == id {
		l.Running.join(j.Msg, true)
		return Joined
	}
	for i := 0; i < l.Queue.Len(); i++ {
		if q := l.Queue.At(i); q.D.ID == id {
			q.join(j.Msg, false)
			return Joined
		}
	}
	j.fresh = l.holdsNothing()
	if r.park != nil && l.Key != "" {
		l.fenceArrival(now) // lane_failure.go: the barrier
	}
	if prior := r.tries.prior(id); prior.failures >= r.Cfg.MaxAttempts {
		// It failed for good on an earlier delivery: one call per
		// delivery, after its backoff.
		j.notBefore = now.Add(r.Backoff(prior.failures))
	}
	if t := l.trouble; t != nil && t.held {
		out := l.returning(j) // lane_failure.go: S5, and the order on the way back
		if out == Queued {
			r.take(j)
		}
		return out
	} else if l.roomGap != "" && id != l.roomGap {
		return Room // S10: an earlier message of the key was sent back
	} else if l.closeRoomGap(); !r.room.admit(l, j, now) {
		l.openRoomGap(id)
		return Room // S10
	}
	l.place(j, now)
	r.take(j)
	return Queued
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
func (l *Lane) place(j *Job, now time.Time) {
	i := l.Queue.Len()
	if ordersBySeq(l, j) {
		// The queue holds each producer's deliveries in number order, so
		// the search from the back ends at the first of them below j.
		for k := l.Queue.Len() - 1; k >= 0; k-- {
			if q := l.Queue.At(k); q.D.Producer == j.D.Producer {
				if q.D.Seq < j.D.Seq {
					break
				}
				i = k
			}
		}
	}
	if i == 0 && l.Queue.Len() > 0 && l.Retry != nil && !l.turn && l.pk.failed == nil &&
		now.Before(l.Queue.At(0).notBefore) && l.r.clock.stop(l.Retry) {
		l.Retry, l.Active = nil, false // the caller's next submits a turn
	}
	l.Queue.Insert(i, j)
}

// ordersBySeq reports whether j's place in l follows its stamp: a keyed
// delivery of an ordered subscription, stamped by its producer, from a
// server that may redeliver out of order.
func ordersBySeq(l *Lane, j *Job) bool {
	return l.r.anyOrder && l.r.sub.Ordered && l.Key != "" && j.D.Producer != "" && j.D.Seq != 0
}

// holdsNothing reports whether the lane holds nothing of its key: no
// delivery queued or running, no retry, hold or flight. The shard's mutex
// must be held.
func (l *Lane) holdsNothing() bool {
	return !l.pk.flight && l.Running == nil && l.Retry == nil && l.Queue.Len() == 0 && l.trouble == nil
}

// pushed ends j's call in the lane, which the call path judged v: the
// held-key record notes v, and the lane goes once it holds nothing. It
// returns the key events to tell.
func (l *Lane) pushed(j *Job, v Verdict) Effects {
	var fx Effects
	now := time.Now()
	l.sh.mu.Lock()
	defer l.sh.mu.Unlock()
	l.Running = nil
	if v.took > 0 {
		l.pace = ewma(l.pace, v.took)
		l.stats.ran(v.took)
	}
	l.note(j, v, now, &fx)
	l.release()
	return fx
}

// note records v, the call path's verdict on j, in the key's trouble: the
// held-key record that HeldKeys and Stats.Held read, whatever the door
// (the pull path's settle, and push's, pushed). A failure starts or
// updates it; a failure for good that holds the key marks it held and
// tells KeyHeld once; the message's success, or the service giving up on
// it, ends it. The shard's mutex must be held.
func (l *Lane) note(j *Job, v Verdict, now time.Time, fx *Effects) {
	t := l.trouble
	switch {
	case v.Out == Acked:
		if t != nil && t.id == j.D.ID {
			l.endTrouble(fx, ReasonSucceeded, now)
		}
		return
	case v.Out == Deduplicated || v.Out == Shutdown:
		return
	case t == nil || t.id != j.D.ID:
		t = &trouble{id: j.D.ID, since: now}
		l.trouble = t
	}
	t.attempt, t.err, t.retryAt = j.D.Attempt, v.Err, time.Time{}
	switch v.Out {
	case Retried:
		t.retryAt = now.Add(v.Delay)
	case Parked:
		l.endTrouble(nil, "", now) // parking tells of the park (KeyParked)
	case Failed:
		if v.deadLettered && l.Key != "" && l.r.sub.Ordered {
			// The service forwards the message instead of sending it
			// back, and goes on with the key.
			l.endTrouble(fx, ReasonDeadLettered, now)
		} else {
			l.trouble = nil // nothing to keep in order behind it (S8)
		}
	case HoldKey:
		t.held = true
		t.lapse = l.r.clock.after(l.r.Cfg.RedeliveryWait, func() { l.lapsed(t) })
		if !t.reported {
			t.reported = true
			fx.events = append(fx.events, KeyEvent{Kind: KeyHeld, HeldKey: l.heldKey(), At: now})
		}
	}
}

// closeRoomGap ends the lane's room gap, if it has one. The shard's mutex must be
// held.
func (l *Lane) closeRoomGap() {
	if l.roomGap == "" {
		return
	}
	l.r.clock.stop(l.roomGapEnd)
	l.roomGap, l.roomGapEnd = "", nil
}

// laneStats is what a lane counts of its calls, for Stats. Guarded by the
// lane's shard mutex, like the lane.
type laneStats struct {
	calls int
	busy  time.Duration
	// part is 1 + the key's partition, 0 until a Stats computes it:
	// hashing the key costs a cache miss on its bytes, once per lane
	// rather than once per call.
	part int32
}

// ran counts a call that took d.
func (s *laneStats) ran(d time.Duration) {
	s.calls++
	s.busy += d
}

// laneShards spreads the lanes over this many mutexes.
const laneShards = 64

// lanes holds a lane for every key with something in this Receive: a
// delivery queued or running, a retry pending, or a hold (S5). A key with
// none of these has no lane, so idle keys leave nothing behind.
type lanes struct {
	shards [laneShards]laneShard
	next   atomic.Uint32 // spreads the lanes of unkeyed messages over the shards
}

// A laneShard guards its lanes, and every field of each, with mu.
type laneShard struct {
	mu    sync.Mutex
	keyed map[string]*Lane // by key
	loose map[*Lane]bool   // lanes of messages without a key, one message each
}

// with calls f with the lane of key, made if there is none, or with a new
// Lane of its own for a message without a key, under the lane's shard's
// mutex, and returns the lane. f must not block.
func (ls *lanes) with(r *Engine, key string, f func(l *Lane)) *Lane {
	var l *Lane
	if key == "" {
		sh := &ls.shards[ls.next.Add(1)%laneShards]
		sh.mu.Lock()
		defer sh.mu.Unlock()
		l = sh.looseLane(r)
	} else {
		sh := &ls.shards[laneHash(key)%laneShards]
		sh.mu.Lock()
		defer sh.mu.Unlock()
		l = sh.keyLane(r, key)
	}
	f(l)
	return l
}

// keyLane returns the lane of key, making it if there is none. sh.mu must
// be held.
func (sh *laneShard) keyLane(r *Engine, key string) *Lane {
	if l := sh.keyed[key]; l != nil {
		return l
	}
	if sh.keyed == nil {
		sh.keyed = make(map[string]*Lane)
	}
	l := &Lane{r: r, sh: sh, Key: key}
	sh.keyed[key] = l
	return l
}

// looseLane makes a lane for one message without a key. sh.mu must be held.
func (sh *laneShard) looseLane(r *Engine) *Lane {
	if sh.loose == nil {
		sh.loose = make(map[*Lane]bool)
	}
	l := &Lane{r: r, sh: sh}
	sh.loose[l] = true
	return l
}

// laneHash is FNV-1a, 32 bits: it only spreads keys over the shards.
func laneHash(key string) uint32 {
	h := uint32(2166136261)
	for i := 0; i < len(key); i++ {
		h ^= uint32(key[i])
		h *= 16777619
	}
	return h
}

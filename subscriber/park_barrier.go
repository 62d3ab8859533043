package subscriber

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// A barrier keeps a delivery from running before this Receive has seen
// every park of its key that another process recorded before the service
// sent it, at the cost of a marker's round trip for each park rather than
// for each key new to the process.
//
// The service moves a key between the processes of a subscription only
// when none has a message of it outstanding. A process that parks a key
// records the park, learns of it from the log, and then waits D
// (WithParkingWait) before it acks what it parked (flight.fly): the key's
// next message can reach another process only once the park is D old, by
// the parker's clock. That process's view of the log may lag, though, and
// show the key free. Its view holds every event published before a marker
// of its own that has come back (controllog.Log.Sync): the log is in one
// order. So a delivery that arrives at a lane holding nothing of its key
// runs at once if a marker this Receive sent within the last D, by its own
// clock, has come back: that marker was published after the park was
// stored, so the view has the park. Otherwise it waits for a marker sent
// after it arrived, as every such delivery once did.
//
// To keep that window open without a wait, a Receive that is receiving
// keys new to it sends itself a marker every D/4 and does not wait for it;
// a Receive that sees no new key for D sends nothing. Markers are shared:
// deliveries that arrive while one is on its way wait for the next, so a
// busy Receive sends one marker per round trip at most.
//
// The argument uses durations on each process's clock, never wall times
// compared across processes: it holds as long as the clocks of two
// processes run at the same rate within a small fraction of D, which
// monotonic clocks do. A parker that dies during its wait leaves what it
// parked leased for at least 5 s more (the official client renews a
// lease when 5 s of it are left), which is why D is at most 5 s. If the
// control topic's round trip is longer than about 3D/4, markers come back
// too late to keep the window open, and new keys wait for one each time:
// slower, as before, never unsafe.
type barrier struct {
	// started counts the markers begun; a delivery arriving now needs the
	// next. passed is the newest marker seen back. Both grow only.
	started atomic.Uint64
	passed  atomic.Uint64

	// base is when the Receive began, set once; freshSent is when the
	// newest marker seen back was sent, lastStart when the last one was
	// begun, and lastNew when a key new to a lane last arrived, all as
	// durations since base (0 for never).
	base      time.Time
	window    time.Duration // D; set once
	freshSent atomic.Int64
	lastStart atomic.Int64
	lastNew   atomic.Int64

	mu sync.Mutex
	// lanes and calls wait for their fence. Guarded by mu; lock order: a
	// lane's shard mutex, then mu.
	lanes []fenceLane
	calls []fenceCall
	// kick wakes the parking loop, which sends markers.
	kick chan struct{}
}

// since returns now as a duration since b.base, never 0.
func (b *barrier) since(now time.Time) int64 { return max(int64(now.Sub(b.base)), 1) }

// arrived records that a delivery of a key new to its lane arrived at now,
// and returns the marker it must wait for: 0 if the view is fresh, that is
// if a marker sent within the window has come back, or else the first
// marker begun after this call. Either way it keeps markers coming while
// new keys do.
func (b *barrier) arrived(now time.Time) uint64 {
	t := b.since(now)
	if b.lastNew.Swap(t) < t-int64(b.window)/4 {
		b.mu.Lock()
		b.wake() // new keys after a pause: the loop may have to begin sending markers
		b.mu.Unlock()
	}
	if sent := b.freshSent.Load(); sent != 0 && t-sent <= int64(b.window) {
		return 0
	}
	return b.want()
}

// refreshDue reports whether the loop should begin a marker now to keep
// the window open: new keys arrived within the window, and none was begun
// in the last quarter of it.
func (b *barrier) refreshDue(now time.Time) bool {
	t := b.since(now)
	return t-b.lastNew.Load() <= int64(b.window) && t-b.lastStart.Load() >= int64(b.window)/4
}

// fenceLane is a lane whose deliveries wait for marker fence.
type fenceLane struct {
	l     *lane
	fence uint64
}

// fenceCall is a caller of sync waiting for marker fence.
type fenceCall struct {
	fence uint64
	done  chan struct{}
}

// want returns the marker a delivery arriving now must wait for: the
// first one begun after this call.
func (b *barrier) want() uint64 { return b.started.Load() + 1 }

// wait registers l to be moved on (lane.unfence) once its fence has
// passed, and reports false if it has already. The lane's shard mutex must
// be held.
func (b *barrier) wait(l *lane) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.passed.Load() >= l.pk.fence {
		return false
	}
	b.lanes = append(b.lanes, fenceLane{l, l.pk.fence})
	b.wake()
	return true
}

// wake tells the loop a marker is wanted. b.mu must be held.
func (b *barrier) wake() {
	select {
	case b.kick <- struct{}{}:
	default:
	}
}

// sync waits until the control log has applied every event published
// before the call, or returns ctx.Err(): it waits for the barrier's next
// marker, which it shares with the lanes.
func (p *parking) sync(ctx context.Context) error {
	return p.syncTo(ctx, p.b.want())
}

// syncTo waits until marker fence has come back, or returns ctx.Err().
func (p *parking) syncTo(ctx context.Context, fence uint64) error {
	b := &p.b
	c := fenceCall{fence: fence, done: make(chan struct{})}
	b.mu.Lock()
	if b.passed.Load() >= c.fence {
		b.mu.Unlock()
		return nil
	}
	b.calls = append(b.calls, c)
	b.wake()
	b.mu.Unlock()
	select {
	case <-c.done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-p.r.stopping:
		return ErrNotReceiving
	}
}

// wanted reports whether a lane or a call waits for a marker not yet
// begun.
func (b *barrier) wanted() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	started := b.started.Load()
	for _, w := range b.lanes {
		if w.fence > started {
			return true
		}
	}
	for _, c := range b.calls {
		if c.fence > started {
			return true
		}
	}
	return false
}

// pass records that marker n came back, and returns the lanes it frees;
// the calls it frees are told at once.
func (b *barrier) pass(n uint64) []*lane {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.passed.Store(n)
	var free []*lane
	waiting := b.lanes[:0]
	for _, w := range b.lanes {
		if w.fence <= n {
			free = append(free, w.l)
		} else {
			waiting = append(waiting, w)
		}
	}
	clear(b.lanes[len(waiting):])
	b.lanes = waiting
	calls := b.calls[:0]
	for _, c := range b.calls {
		if c.fence <= n {
			close(c.done)
		} else {
			calls = append(calls, c)
		}
	}
	clear(b.calls[len(calls):])
	b.calls = calls
	return free
}

// barrierRound sends markers, one at a time, while something waits for
// one not yet begun or a refresh is due, and moves on the lanes each
// frees. Run by the parking loop.
func (p *parking) barrierRound() {
	b := &p.b
	for b.wanted() || b.refreshDue(time.Now()) {
		n := b.started.Add(1)
		sent := b.since(time.Now()) // before the marker is published
		b.lastStart.Store(sent)
		for tries := 1; ; tries++ {
			err := p.log.Sync(p.ops)
			if err == nil {
				break
			}
			select {
			case <-p.stopLoop:
				return
			case <-p.ops.Done():
				return
			case <-time.After(p.r.backoff(tries)):
			}
		}
		if b.freshSent.Load() < sent {
			b.freshSent.Store(sent) // only this loop stores it
		}
		for _, l := range b.pass(n) {
			l.unfence()
		}
	}
}

// nextRefresh returns how long the loop may sleep before a refresh could
// be due, or false if new keys have stopped coming.
func (b *barrier) nextRefresh(now time.Time) (time.Duration, bool) {
	t := b.since(now)
	if t-b.lastNew.Load() > int64(b.window) {
		return 0, false
	}
	return max(time.Duration(b.lastStart.Load()+int64(b.window)/4-t), time.Millisecond), true
}

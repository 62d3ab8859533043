package subscriber

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// A barrier keeps a delivery from running before this Receive has seen
// every park of its key that another process recorded before the service
// sent it.
//
// The service moves a key between the processes of a subscription only
// when none has a message of it outstanding. A process that parks a key
// records the park, and waits for the log to take it, before it acks what
// it parked; only then can the key's next message go to another process.
// That process's view of the log may lag, though, and show the key free.
// So a delivery that arrives at a lane holding nothing of its key waits
// for a marker: an event this Receive publishes after the delivery arrived
// and sees come back (controllog.Log.Sync). The log is in one order, so by
// then the Receive has applied every event published before the marker,
// the park included.
//
// Markers are shared: deliveries that arrive while one is on its way wait
// for the next, so a busy Receive sends one marker per round trip to the
// service, whatever its rate of new keys; a key whose deliveries keep
// coming, or that runs, pays nothing.
type barrier struct {
	// started counts the markers begun; a delivery arriving now needs the
	// next. passed is the newest marker seen back. Both grow only.
	started atomic.Uint64
	passed  atomic.Uint64

	mu sync.Mutex
	// lanes and calls wait for their fence. Guarded by mu; lock order: a
	// lane's shard mutex, then mu.
	lanes []fenceLane
	calls []fenceCall
	// kick wakes the parking loop, which sends markers.
	kick chan struct{}
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
	b := &p.b
	c := fenceCall{fence: b.want(), done: make(chan struct{})}
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
// one not yet begun, and moves on the lanes each frees. Run by the
// parking loop.
func (p *parking) barrierRound() {
	b := &p.b
	for b.wanted() {
		n := b.started.Add(1)
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
		for _, l := range b.pass(n) {
			l.unfence()
		}
	}
}

package publisher

import (
	"context"
	"sync"
	"time"
)

// sweepEvery bounds how long the room of an unordered message that is done
// stays reserved while an older unordered message is still pending (P8).
const sweepEvery = 5 * time.Millisecond

// unordered keeps the flow-control room of unordered messages, which is
// released as each message is done (P8). It is used only with flow
// control: without it, nothing about an unordered message needs keeping.
//
// Unordered messages are not gated: their Results are the official
// client's (Result.direct). The official client sends them in concurrent
// batches that finish in any order, and its results announce themselves
// only by closing a channel, so a goroutine must wait on one of them to
// learn anything. Waiting on each would take a goroutine per message, or a
// reflect.Select over all of them, which costs about 150 ns per pending
// message on every wake. Instead one watch goroutine waits on the oldest,
// and on a timer while it waits, and on every wake sweeps the whole list,
// releasing the room of every message that is done, whatever its place.
// A Publish that finds no room sweeps first too (reclaim), so that room
// held by done messages never refuses a message.
type unordered struct {
	mu sync.Mutex
	// inflight are the unordered messages in the official client's hands
	// whose room is not yet released, in Publish order. Guarded by mu.
	inflight []*Result
	// watching is set while the watch goroutine runs; it runs exactly
	// while inflight is not empty. Guarded by mu.
	watching bool
}

// sendUnordered hands the unordered message r to the official client and
// keeps its room until it is done.
func (p *Publisher) sendUnordered(ctx context.Context, r *Result) {
	u := &p.unordered
	u.mu.Lock()
	defer u.mu.Unlock()
	r.under = p.pub.Publish(ctx, &r.msg)
	r.state.Store(direct)
	u.inflight = append(u.inflight, r)
	if !u.watching {
		u.watching = true
		// Under closeMu, as enqueue's Add: see Publisher.watchers.
		p.watchers.Add(1)
		go p.watchUnordered()
	}
}

// watchUnordered releases the room of unordered messages as they finish,
// and exits when none is left.
func (p *Publisher) watchUnordered() {
	defer p.watchers.Done()
	u := &p.unordered
	timer := time.NewTimer(sweepEvery)
	defer timer.Stop()
	u.mu.Lock()
	for {
		p.sweepUnordered()
		if len(u.inflight) == 0 {
			break
		}
		head := u.inflight[0].under
		u.mu.Unlock()
		timer.Reset(sweepEvery)
		select {
		case <-head.Ready():
		case <-timer.C:
			// The oldest is slow: the messages behind it may be done.
		}
		u.mu.Lock()
	}
	u.watching = false
	u.inflight = nil // P7: give back what a burst made the slice grow to
	u.mu.Unlock()
}

// reclaim releases the room of every unordered message that is done. Flow
// control calls it before refusing a message or waiting for room.
func (p *Publisher) reclaim() {
	u := &p.unordered
	u.mu.Lock()
	p.sweepUnordered()
	u.mu.Unlock()
}

// sweepUnordered releases the room of every unordered message that is
// done and drops it from inflight, keeping the others in order. u.mu is
// held.
func (p *Publisher) sweepUnordered() {
	u := &p.unordered
	n := 0
	for _, r := range u.inflight {
		if readyNow(r.under) {
			if r.room {
				r.room = false
				p.flow.release(r.size)
			}
			continue
		}
		u.inflight[n] = r
		n++
	}
	clear(u.inflight[n:])
	u.inflight = u.inflight[:n]
}

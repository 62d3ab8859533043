package publisher

import (
	"context"
	"sync"
	"time"
)

// sweepEvery bounds how long the room of an unordered message that is done
// stays reserved while an older unordered message is still pending (P8).
const sweepEvery = 5 * time.Millisecond

// unordered keeps track of the unordered messages in the official
// client's hands: to count each one's outcome (observe.go) and, with flow
// control, to release its room as soon as it is done (P8).
//
// Unordered messages are not gated: their Results are the official
// client's (Result.direct). The official client sends them in concurrent
// batches that finish in any order, and its results announce themselves
// only by closing a channel, so a goroutine must wait on one of them to
// learn anything. Waiting on each would take a goroutine per message, or a
// reflect.Select over all of them, which costs about 150 ns per pending
// message on every wake. Instead one watch goroutine waits on the oldest.
// When it is done, the watch settles the run of done messages at the head
// of the list, so that each message is looked at about once however long
// the list grows. With flow control it also wakes on a timer while the
// oldest is pending, and then sweeps the whole list, releasing the room of
// every message that is done, whatever its place; the list is as long as
// flow control allows at most. A Publish that finds no room sweeps first
// too (reclaim), so that room held by done messages never refuses a
// message.
type unordered struct {
	mu sync.Mutex
	// inflight are the unordered messages in the official client's hands
	// not yet settled here, in Publish order. Guarded by mu.
	inflight []*Result
	// watching is set while the watch goroutine runs; it runs exactly
	// while inflight is not empty. Guarded by mu.
	watching bool
}

// sendUnordered hands the unordered message r to the official client and
// keeps track of it until it is done.
func (p *Publisher) sendUnordered(ctx context.Context, r *Result) {
	// The official Publish runs outside the mutex: concurrent Publish
	// calls of unordered messages share only the append.
	r.under = p.pub.Publish(ctx, &r.msg)
	r.state.Store(direct)
	u := &p.unordered
	u.mu.Lock()
	defer u.mu.Unlock()
	u.inflight = append(u.inflight, r)
	if !u.watching {
		u.watching = true
		// Under closeMu, as enqueue's Add: see Publisher.watchers.
		p.watchers.Add(1)
		go p.watchUnordered()
	}
}

// watchUnordered settles unordered messages as they finish, and exits when
// none is left.
func (p *Publisher) watchUnordered() {
	defer p.watchers.Done()
	u := &p.unordered
	var timer *time.Timer
	var tick <-chan time.Time // nil without flow control: never fires
	if p.flow != nil {
		timer = time.NewTimer(sweepEvery)
		defer timer.Stop()
		tick = timer.C
	}
	u.mu.Lock()
	whole := p.flow != nil
	for {
		if whole {
			p.sweepUnordered()
		} else {
			p.settleHead()
		}
		if len(u.inflight) == 0 {
			break
		}
		head := u.inflight[0].under
		u.mu.Unlock()
		if timer != nil {
			timer.Reset(sweepEvery)
		}
		select {
		case <-head.Ready():
			whole = false
		case <-tick:
			// The oldest is slow: the messages behind it may be done.
			whole = true
		}
		u.mu.Lock()
	}
	u.watching = false
	u.inflight = nil // P7: give back what a burst made the slice grow to
	u.mu.Unlock()
}

// reclaim settles every unordered message that is done: it counts it and
// releases its room. Flow control calls it before refusing a message or
// waiting for room, and Flush once the messages it flushed are done.
func (p *Publisher) reclaim() {
	u := &p.unordered
	u.mu.Lock()
	p.sweepUnordered()
	u.mu.Unlock()
}

// sweepUnordered settles every unordered message that is done and drops
// it from inflight, keeping the others in order. u.mu is held.
func (p *Publisher) sweepUnordered() {
	u := &p.unordered
	n := 0
	for _, r := range u.inflight {
		if readyNow(r.under) {
			p.settleUnordered(r)
			continue
		}
		u.inflight[n] = r
		n++
	}
	clear(u.inflight[n:])
	u.inflight = u.inflight[:n]
}

// settleHead settles the run of done messages at the head of inflight and
// drops them. u.mu is held.
func (p *Publisher) settleHead() {
	u := &p.unordered
	n := 0
	for n < len(u.inflight) && readyNow(u.inflight[n].under) {
		p.settleUnordered(u.inflight[n])
		n++
	}
	clear(u.inflight[:n])
	u.inflight = u.inflight[n:]
}

// settleUnordered counts the outcome of r, an unordered message that is
// done, and releases its room. u.mu is held. Its time from Publish is not
// recorded: the watch may see it done well after it was, behind an older
// message.
func (p *Publisher) settleUnordered(r *Result) {
	out := outPublished
	if _, err, _ := tryGet(r.under); err != nil {
		out = outFailed
	}
	p.rec.counted(out)
	p.releaseRoom(r)
}

package publisher

import (
	"context"
	"time"
)

// This file holds the lazy gates (see keyState): settled by whoever looks,
// and watched only when no one else will.

// quietAfter is how often a shard looks at its lazy gates (tick): a gate
// is looked at between one and two periods after it was made, and again
// as long as its key is published. Long enough that a caller who waits
// for its Results, under a service's usual latency, does it first; short
// enough that a key published without anyone looking leaves its gate (P7)
// and its counts soon after its messages are done.
const quietAfter = 100 * time.Millisecond

// settleEvery is how many messages in flight a lazy gate gathers between
// its Publish calls' looks at what is done.
const settleEvery = 32

// lookLazily is a Publish call's look at its lazy gate ks, at now, before
// it counts and sends its message; ks.mu is held. If the key's messages
// are all done, the key would have been idle had a watcher settled them:
// it settles them and starts the rate check afresh, as a new gate would
// (keyRate: an episode ends when nothing is outstanding). Otherwise it
// settles what is done once every settleEvery messages in flight, so that
// a key published without anyone looking keeps a short list; looking more
// often would read, at every call, channels that the official client's
// goroutines have just written.
func (p *Publisher) lookLazily(ks *keyState, now time.Duration) {
	ks.published = true
	n := len(ks.inflight)
	if n == 0 {
		return
	}
	if readyNow(ks.inflight[n-1].under) {
		p.settleLazy(ks, n, now)
		if len(ks.inflight) == 0 {
			ks.rate = keyRate{}
		}
		return
	}
	if n%settleEvery == 0 {
		p.settleLazy(ks, n, now)
	}
}

// newGate makes key's gate in sh, whose mutex is held, watched or lazy
// (see keyState). Publish holds closeMu for reading (see watchers).
func (p *Publisher) newGate(ctx context.Context, sh *shard, key string) *keyState {
	ks := &keyState{p: p, sh: sh, key: key}
	if p.stamps != nil {
		ks.counter = sh.counters.take(key, p.stamps)
	}
	ks.inflight = ks.first[:0]
	sh.keys[key] = ks
	sh.peak = max(sh.peak, len(sh.keys))
	if p.flow != nil || p.rec.timed(ctx) {
		ks.watched = true
		p.watchers.Add(1)
		go p.watch(sh, key, ks)
	} else {
		p.list(sh, ks)
	}
	return ks
}

// list puts ks, a lazy gate, on sh's young list for tick to look at, and
// makes sure tick is due. sh.mu is held.
func (p *Publisher) list(sh *shard, ks *keyState) {
	ks.gen = sh.young
	sh.lists[sh.young].push(ks)
	if sh.ticking {
		return
	}
	sh.ticking = true
	if sh.tick == nil {
		sh.tick = time.AfterFunc(quietAfter, func() { p.tick(sh) })
		return
	}
	sh.tick.Reset(quietAfter)
}

// tick is a shard's timer, every quietAfter while it has lazy gates: it
// looks at the gates listed before the last tick. One timer per shard,
// not per gate, so that a burst's keys, going quiet together, start no
// goroutine each. It settles what is done in each (look). A gate whose
// key was published since the last look is listed again, to be looked at
// at the next tick but one. Any other has gone quiet, and no Publish call
// will settle the rest: if messages are still in flight, tick makes the
// gate watched.
func (p *Publisher) tick(sh *shard) {
	sh.mu.Lock()
	old := sh.young ^ 1
	due := sh.lists[old].take()
	sh.young = old
	sh.ticking = sh.lists[old^1].head != nil
	if sh.ticking {
		sh.tick.Reset(quietAfter)
	}
	sh.mu.Unlock()
	for _, ks := range due {
		p.look(sh, ks)
	}
}

// look is tick's look at the lazy gate ks, taken off its list: it settles
// what is done, deleting the gate if that leaves the key idle (drain).
func (p *Publisher) look(sh *shard, ks *keyState) {
	ks.mu.Lock()
	if ks.watched || ks.gone {
		ks.mu.Unlock()
		return
	}
	if p.drain(ks) {
		return
	}
	switch {
	case ks.watched || ks.gone:
		ks.mu.Unlock()
	case ks.published:
		ks.published = false
		ks.mu.Unlock()
		sh.mu.Lock()
		if !ks.gone && !ks.listed { // gone is written with both mutexes held
			p.list(sh, ks)
		}
		sh.mu.Unlock()
	default:
		p.watchGate(ks)
		ks.mu.Unlock()
	}
}

// A gateList is a doubly linked list of lazy gates, through their prev and
// next; guarded by its shard's mutex.
type gateList struct{ head *keyState }

func (l *gateList) push(ks *keyState) {
	ks.prev, ks.next, ks.listed = nil, l.head, true
	if l.head != nil {
		l.head.prev = ks
	}
	l.head = ks
}

func (l *gateList) remove(ks *keyState) {
	if ks.prev != nil {
		ks.prev.next = ks.next
	} else {
		l.head = ks.next
	}
	if ks.next != nil {
		ks.next.prev = ks.prev
	}
	ks.prev, ks.next, ks.listed = nil, nil, false
}

// take empties l and returns its gates.
func (l *gateList) take() []*keyState {
	var out []*keyState
	for ks := l.head; ks != nil; {
		next := ks.next
		ks.prev, ks.next, ks.listed = nil, nil, false
		out = append(out, ks)
		ks = next
	}
	l.head = nil
	return out
}

// stopTicks stops the shards' timers once every gate is gone, at the end
// of shutdown.
func (p *Publisher) stopTicks() {
	for i := range p.shards {
		sh := &p.shards[i]
		sh.mu.Lock()
		if sh.tick != nil {
			sh.tick.Stop()
		}
		sh.ticking = false
		sh.mu.Unlock()
	}
}

// watchGate makes a watch goroutine own ks, which is lazy and not gone.
// ks.mu is held: every Add of watchers happens with the mutex of a gate
// that is not gone, and Close's shutdown makes every gate watched before it
// waits, so none comes after the wait has begun.
func (p *Publisher) watchGate(ks *keyState) {
	ks.watched = true
	p.watchers.Add(1)
	go p.watch(ks.sh, ks.key, ks)
}

// watchNow makes ks watched unless it is or is gone: for a caller about to
// wait on a Result's Ready channel, which only a watcher closes.
func (ks *keyState) watchNow() {
	ks.mu.Lock()
	defer ks.mu.Unlock()
	if !ks.watched && !ks.gone {
		ks.p.watchGate(ks)
	}
}

// settleLazy settles, at now, the done messages among the first n of a
// lazy gate's inflight. A failure is left to a watcher, which it starts:
// failing the tail and resuming the key are its work (P4, P5). ks.mu is
// held.
func (p *Publisher) settleLazy(ks *keyState, n int, now time.Duration) {
	done := p.settleDone(ks.inflight[:n], now)
	ks.drop(done)
	if done < n && readyNow(ks.inflight[0].under) {
		p.watchGate(ks)
	}
}

// drain settles what is done in the lazy gate ks, for a Result's Get or
// the timer. If that leaves the key idle, it deletes the gate, settling
// the last message with the shard's mutex held, as watch does (P7), and
// reports true with both mutexes let go; otherwise ks.mu is still held,
// and ks may have become watched.
func (p *Publisher) drain(ks *keyState) bool {
	now := p.rec.now()
	if n := len(ks.inflight); n > 1 {
		p.settleLazy(ks, n-1, now)
	}
	if ks.watched || len(ks.inflight) > 1 || (len(ks.inflight) == 1 && !readyNow(ks.inflight[0].under)) {
		return false
	}
	// The last message is done, or there is none: take the shard's mutex
	// first, and look again.
	sh := ks.sh
	ks.mu.Unlock()
	sh.mu.Lock()
	ks.mu.Lock()
	if !ks.watched && !ks.gone {
		p.settleLazy(ks, len(ks.inflight), now)
	}
	if ks.watched || ks.gone || len(ks.inflight) > 0 {
		sh.mu.Unlock()
		return false
	}
	p.deleteGate(sh, ks.key, ks)
	ks.mu.Unlock()
	sh.mu.Unlock()
	return true
}

// await waits for r, a pending Result of the lazy gate ks, on the caller's
// goroutine: it waits on the official result and settles the key's done
// messages itself. It reports false if r must be waited for on its Ready
// channel instead: ks is watched or gone, r is held behind a failure, or r
// did not settle (a failure at or before it, which a watcher now settles).
func (ks *keyState) await(ctx context.Context, r *Result) (bool, error) {
	ks.mu.Lock()
	if ks.watched || ks.gone {
		// A watcher writes under without the mutex (settleDone).
		ks.mu.Unlock()
		return false, nil
	}
	under := r.under
	ks.mu.Unlock()
	if under == nil || r.isReady() {
		return false, nil
	}
	select {
	case <-under.Ready():
	case <-ctx.Done():
		return true, ctx.Err()
	}
	ks.mu.Lock()
	if !ks.watched && !ks.gone && ks.p.drain(ks) {
		return r.isReady(), nil
	}
	ks.mu.Unlock()
	return r.isReady(), nil
}

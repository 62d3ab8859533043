package publisher

import (
	"context"
	"hash/maphash"
	"sync"
	"time"

	"cloud.google.com/go/pubsub/v2"
)

// numShards spreads the keys' gates over this many maps and mutexes.
const numShards = 32

// shrinkAt is the number of keys above which an emptied shard map is
// replaced: Go maps keep their peak size, and P7 wants an idle key to
// leave nothing behind.
const shrinkAt = 1024

// A shard holds the gates of the keys that hash to it. Its mutex guards
// the map only: a Publish call holds it to find or make its key's gate,
// and a watch goroutine to delete its gate. Each gate has a mutex of its
// own, taken after the shard's, so that the official client's Publish,
// called with the gate's mutex held, holds up no other key.
type shard struct {
	mu   sync.Mutex
	keys map[string]*keyState // keys with messages outstanding; guarded by mu
	peak int                  // largest len(keys) since keys was made; guarded by mu
	seq  uint64               // Publish calls of its keys so far, for Result.seq; guarded by mu
	// counters keeps the counters of idle keys (stamp.go); guarded by mu.
	counters counters
	// lists are the lazy gates for tick to look at, two generations:
	// lists[young] made since the last tick, the other before; guarded
	// by mu, as is ticking, set while tick is due.
	lists   [2]gateList
	young   uint8
	ticking bool
	tick    *time.Timer
}

// keyState is the gate of one key with messages outstanding. It exists
// while inflight is not empty, and is deleted, with the shard's mutex and
// its own held, by whoever settles its last message (P7).
//
// The official client tells that a message is done only by closing a
// channel, so someone must wait on it. A gate is watched (a goroutine of
// its own waits for its results, see watch) when that is the only way to
// keep a promise: with flow control, whose room must come back as each
// message is done (P8); when the duration metric is on, which times the
// service's answer, not the caller's look; once a message has failed
// (P4, P5); and when someone asks for a Result's Ready channel, or Flush
// or Close waits. Otherwise the gate is lazy: its done messages are
// settled by whoever looks next (Result.Get, which waits on the official
// result itself; the key's next Publish), and by its shard's timer, in
// case no one does (see tick). A burst then parks no goroutine per key,
// which the garbage collector would scan (see FIGURES.md, the publisher's
// profile).
//
// Every field is guarded by mu, except first, which only backs inflight,
// and p, sh and key, set once. A Publish call takes mu before it lets go
// of the shard's mutex, and the gate is deleted with both held, so no
// message is ever added to a gate that is gone.
type keyState struct {
	mu sync.Mutex
	// watched is set once a watch goroutine owns the gate: from then on
	// only it settles the gate's messages, until it deletes the gate.
	watched bool
	// gone is set when the gate is deleted: a Result or a timer that
	// still points to it then finds nothing to do.
	gone bool
	// published is set by each Publish call on a lazy gate, and cleared
	// by its shard's look (see tick).
	published bool
	// prev, next and gen place a lazy gate in its shard's lists of gates
	// to look at (lazy.go), while listed; guarded by the shard's mutex.
	prev, next *keyState
	gen        uint8
	listed     bool
	p          *Publisher
	sh         *shard
	key        string
	// inflight are the key's messages in the official client's hands,
	// in Publish order, which is the order the official client took them
	// in: it is called with mu held. Their results become ready in that
	// order, as the official client sends one batch of a key at a time
	// (P3). Publish calls only append; only the watcher removes.
	inflight []*Result
	// failure is the cause of the key's last failure while its tail
	// drains in the official client, nil when the key is healthy. It is
	// set when the first failed result is reported, together with the
	// failure of every message then in inflight, and cleared when
	// inflight has drained. Only the watcher sets it.
	failure error
	// held are messages published after failure was reported (P5). They
	// wait here, in Publish order, until inflight drains and the key is
	// resumed: given to the official client now, they would fail too, as
	// it keeps the key paused.
	held []*Result
	// counter numbers the key's messages (stamp.go). It is taken from the
	// shard's counters when the gate is made, and kept there when the
	// gate is deleted, both with the shard's mutex held.
	counter counter
	// first is inflight's first array, allocated with the keyState: most
	// keys go idle before they have more messages in flight.
	first [8]*Result
	// rate is the key's publish rate check (rate.go); it goes with the
	// gate, so a key is checked per episode of messages outstanding.
	rate keyRate
}

// shard returns the shard of key. maphash, seeded per Publisher, is the
// cheapest good spread of Go strings; the shards are a detail of one
// process, unlike ordering.Partition.
func (p *Publisher) shard(key string) *shard {
	return &p.shards[maphash.String(p.seed, key)%numShards]
}

// gate returns key's gate with its mutex held, or nil if key has none.
func (p *Publisher) gate(key string) *keyState {
	sh := p.shard(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	ks := sh.keys[key]
	if ks != nil {
		ks.mu.Lock()
	}
	return ks
}

// enqueue hands r to its key's gate, which sends it now or holds it (P5),
// or fails it unsent if after, WithAfter's, has failed: checked with the
// gate's mutex held, with which a failure and its tail are reported, so
// that a failure of after reported a moment earlier is seen, and one
// reported later fails r with the tail.
func (p *Publisher) enqueue(ctx context.Context, r *Result, after *Result) {
	key := r.msg.OrderingKey
	sh := p.shard(key)
	sh.mu.Lock()
	ks, ok := sh.keys[key]
	if !ok {
		ks = p.newGate(ctx, sh, key)
	}
	if r.seq == 0 {
		// A retried message keeps the place of its first Publish call.
		sh.seq++
		r.seq = sh.seq
	}
	ks.mu.Lock()
	sh.mu.Unlock()
	defer ks.mu.Unlock()
	if !ks.watched {
		p.lookLazily(ks, r.start)
	}
	if after != nil && after.hasFailed() {
		// A gate made for r alone is left empty: its watcher, or the
		// shard's tick for a lazy gate, deletes it.
		p.skipAfter(r, after)
		return
	}
	r.gate = ks
	p.rec.account(key, &ks.rate, r)
	if p.stamps != nil {
		p.stamp(ks, r)
	}
	if ks.failure != nil {
		ks.held = append(ks.held, r)
		return
	}
	r.under = p.pub.Publish(ctx, &r.msg)
	ks.inflight = append(ks.inflight, r)
}

// watch owns ks while its key has messages in flight: it waits for their
// official results in order, releases their flow control, settles their
// Results, and deletes ks when nothing is left (P7). A key's batches
// finish in order (P3), so waiting in order releases each message's room
// as soon as it is done (P8). It settles every result that is ready when
// it wakes, so a batch costs one wake-up, not one per message.
//
// While the key is healthy, published messages are settled without the
// gate's mutex (settleDone), which is then held only to drop them from
// inflight: the key's Publish calls wait on it. A failure, and the tail
// that drains after it, are settled with the mutex held (settle).
func (p *Publisher) watch(sh *shard, key string, ks *keyState) {
	defer p.watchers.Done()
	flush := false
	ks.mu.Lock()
	for {
		if len(ks.inflight) == 0 {
			// Delete the gate with the shard's mutex held, taken first;
			// a Publish call may add a message meanwhile.
			ks.mu.Unlock()
			sh.mu.Lock()
			ks.mu.Lock()
			if p.retire(sh, key, ks) {
				return
			}
		}
		// Publish only appends to inflight, and only this goroutine
		// removes from it or sets failure: what is seen now stays so.
		seen, healthy := ks.inflight, ks.failure == nil
		ks.mu.Unlock()
		if flush {
			// Held messages were sent while closing or flushing, after
			// that flush may have run: flush them rather than wait for
			// the delay threshold.
			p.pub.Flush()
			flush = false
		}
		<-seen[0].under.Ready()
		// The key's results that are ready now became so together, or
		// nearly: one reading of the clock times them all.
		now := p.rec.now()
		done := 0
		if healthy {
			// Messages published while this goroutine waited may be
			// done too: a batch is mostly sent after its first
			// message's watcher started. The last message is settled
			// below, with the locks held, in case it leaves the key
			// idle.
			ks.mu.Lock()
			seen = ks.inflight
			ks.mu.Unlock()
			done = p.settleDone(seen[:len(seen)-1], now)
		}
		ks.mu.Lock()
		ks.drop(done)
		locked := false // the shard's mutex is held too
		for len(ks.inflight) > 0 {
			r := ks.inflight[0]
			id, err, ok := tryGet(r.under)
			if !ok {
				break
			}
			if len(ks.inflight) == 1 && !locked {
				// Settling r may leave the key idle. Take the shard's
				// mutex first, and delete the gate before letting go
				// of it: whoever sees r ready and then looks finds no
				// gate (P7). Only this goroutine removes from
				// inflight, so r is still first.
				ks.mu.Unlock()
				sh.mu.Lock()
				ks.mu.Lock()
				locked = true
				continue
			}
			p.releaseRoom(r)
			ks.drop(1)
			// Read after sending: if Close or Flush starts later, its
			// own flush sends what was sent here.
			if p.settle(key, ks, r, id, err, now) && (p.closing.Load() || p.flushing.Load() > 0) {
				flush = true
			}
		}
		if locked && p.retire(sh, key, ks) {
			return
		}
	}
}

// retire is called with the shard's mutex and the gate's held. If the key
// has nothing in flight, it deletes the gate and lets go of both mutexes,
// and reports true; otherwise it lets go of the shard's only.
func (p *Publisher) retire(sh *shard, key string, ks *keyState) bool {
	if len(ks.inflight) > 0 {
		sh.mu.Unlock()
		return false
	}
	p.deleteGate(sh, key, ks)
	ks.mu.Unlock()
	sh.mu.Unlock()
	return true
}

// deleteGate deletes key's gate ks from sh, whose mutex is held, with the
// gate's (P7), and keeps its counter.
func (p *Publisher) deleteGate(sh *shard, key string, ks *keyState) {
	if p.stamps != nil {
		sh.counters.keep(key, ks.counter, p.counterWindow)
	}
	delete(sh.keys, key)
	ks.gone = true
	if ks.listed {
		sh.lists[ks.gen].remove(ks)
	}
	if len(sh.keys) == 0 && sh.peak > shrinkAt {
		sh.keys, sh.peak = make(map[string]*keyState), 0
	}
}

// settleDone settles the published messages at the head of seen, a
// healthy key's messages in flight, without the gate's mutex, and returns
// how many it settled. It stops at the first message not done or failed,
// which watch settles with the mutex held. No one else touches a message
// that has not failed once it is in flight, and its Result may become
// ready without the mutex, as only failures change the key's state (P4,
// P5).
func (p *Publisher) settleDone(seen []*Result, now time.Duration) int {
	for i, r := range seen {
		id, err, ok := tryGet(r.under)
		if !ok || err != nil {
			return i
		}
		p.releaseRoom(r)
		// The official client is done with the message, and so is
		// everyone else: the Result need not keep it (P7).
		r.under = nil
		r.dropMessage()
		p.rec.settled(r, outPublished, now)
		r.resolve(id, nil)
	}
	return len(seen)
}

// drop removes the first n messages of inflight. The gate's mutex is held.
func (ks *keyState) drop(n int) {
	if n == len(ks.inflight) {
		// Start again at the front of the array, rather than let it
		// creep along and be grown again.
		clear(ks.inflight)
		ks.inflight = ks.inflight[:0]
		return
	}
	clear(ks.inflight[:n])
	ks.inflight = ks.inflight[n:]
}

// tryGet returns the outcome of the official result r if it is ready.
func tryGet(r *pubsub.PublishResult) (id string, err error, ok bool) {
	select {
	case <-r.Ready():
		id, err = r.Get(context.Background())
		return id, err, true
	default:
		return "", nil, false
	}
}

// readyNow reports whether the official result r is ready, without waiting.
func readyNow(r *pubsub.PublishResult) bool {
	select {
	case <-r.Ready():
		return true
	default:
		return false
	}
}

// settle makes r ready with its official outcome, seen at now, unless it
// failed earlier with its key's tail, and advances the key's failure
// state. It reports
// whether held messages were sent. The gate's mutex is held, so a Publish
// call that sees a failure reported also sees the key failing.
func (p *Publisher) settle(key string, ks *keyState, r *Result, id string, err error, now time.Duration) (sent bool) {
	if !r.isReady() {
		if err == nil {
			// As in settleDone.
			r.under = nil
			r.dropMessage()
			p.rec.settled(r, outPublished, now)
			r.resolve(id, nil)
		} else {
			// The first failure since the key was last healthy: new
			// messages are held from now on (P5), and the whole tail
			// fails with it at once (P4). The official client keeps the
			// key paused, so the tail cannot succeed; reporting it now
			// rather than batch by batch means a caller that sees this
			// failure has seen its whole tail too.
			ks.failure = err
			p.rec.paused(key, r, ks.inflight, err)
			r.resolve("", &PublishError{Key: key, Err: err})
			for _, t := range ks.inflight {
				t.resolve("", &PublishError{Key: key, Err: err, Skipped: true})
			}
		}
	}
	if r.hasFailed() {
		// A failed message stays in its Result for Retry.
		r.letGo()
	}
	if ks.failure == nil || len(ks.inflight) > 0 {
		return false
	}
	// The tail has drained in the official client too. Only now is it
	// safe to resume the key: resuming on the first failure would let the
	// next queued batch of the tail through, after the failed message.
	p.pub.ResumePublish(key)
	ks.failure = nil
	p.rec.resumed(key, len(ks.held))
	for i, h := range ks.held {
		h.under = p.pub.Publish(context.Background(), &h.msg)
		ks.inflight = append(ks.inflight, h)
		ks.held[i] = nil
	}
	ks.held = nil
	return len(ks.inflight) > 0
}

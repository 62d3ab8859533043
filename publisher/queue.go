package publisher

import (
	"context"
	"hash/maphash"
	"sync"
	"time"
)

// numShards spreads the keys' queues over this many maps and mutexes.
const numShards = 32

// shrinkAt is the number of keys above which an emptied shard map is
// replaced: Go maps keep their peak size, and P7 wants an idle key to
// leave nothing behind.
const shrinkAt = 1024

// A shard holds the queues of the keys that hash to it. Its mutex guards
// the map and every field of its queues: a Publish call holds it to
// append its message, a sender to take a batch and to settle it. A
// batch's Results are settled, and an idle key's queue deleted, within
// one hold, so that whoever sees a Result ready and then looks sees its
// key's state after it (P4, P5, P7).
type shard struct {
	mu   sync.Mutex
	keys map[string]*keyQueue // keys with messages outstanding; guarded by mu
	peak int                  // largest len(keys) since keys was made; guarded by mu
	seq  uint64               // Publish calls of its keys so far, for Result.seq; guarded by mu
	// counters keeps the counters of idle keys (stamp.go); guarded by mu.
	counters counters
}

// Queue states: what a key's queue waits for.
const (
	idle      uint8 = iota // nothing to send, or a request in flight that will send the rest
	lingering              // its first messages wait for more (linger.go)
	ready                  // in the run queue, for a sender (sender.go)
)

// keyQueue is one key's messages outstanding: gathered, and in flight. It
// exists while the key has any, and is deleted by the sender that settles
// its last message (P7). The unordered messages have a queue too, of key
// "", which may have many requests in flight.
//
// Every field but sh and key, set once, is guarded by the shard's mutex.
type keyQueue struct {
	sh  *shard
	key string
	// unordered is set on the queue of key "": its requests go in
	// parallel, and a failure fails its own messages only.
	unordered bool
	state     uint8
	// pending are the messages not yet sent, in Publish order. A sender
	// takes a batch from its head; Publish appends.
	pending []*Result
	// bytes is the sum of the encoded sizes of pending, for the linger's
	// ByteThreshold.
	bytes int64
	// inflight are the requests in flight, each a batch in Publish
	// order: at most one for a key (P3), any number for "".
	inflight [][]*Result
	// linger is the queue's linger, while lingering (linger.go).
	linger lingerState
	// counter numbers the key's messages (stamp.go). It is taken from the
	// shard's counters when the queue is made, and kept there when the
	// queue is deleted.
	counter counter
	// rate is the key's publish rate check (rate.go); it goes with the
	// queue, so a key is checked per episode of messages outstanding.
	rate keyRate
}

// shard returns the shard of key. maphash, seeded per Publisher, is the
// cheapest good spread of Go strings; the shards are a detail of one
// process, unlike ordering.Partition.
func (p *Publisher) shard(key string) *shard {
	return &p.shards[maphash.String(p.seed, key)%numShards]
}

// enqueue appends r to its key's queue, or fails it unsent if after,
// WithAfter's, has failed: checked with the shard's mutex held, with
// which a failure and its tail are reported, so that a failure of after
// reported a moment earlier is seen, and one reported later fails r with
// the tail. closeMu is held for reading.
func (p *Publisher) enqueue(_ context.Context, r *Result, after *Result) {
	key := r.msg.OrderingKey
	sh := p.shard(key)
	sh.mu.Lock()
	if after != nil && after.hasFailed() {
		sh.mu.Unlock()
		p.skipAfter(r, after)
		return
	}
	q, ok := sh.keys[key]
	if !ok {
		q = p.newQueue(sh, key)
	}
	if r.seq == 0 && key != "" {
		// A retried message keeps the place of its first Publish call.
		sh.seq++
		r.seq = sh.seq
	}
	r.q = q
	if key != "" {
		p.rec.account(key, &q.rate, r)
		if p.stamps != nil {
			p.stamp(q, r)
		}
	}
	q.pending = append(q.pending, r)
	q.bytes += int64(r.size)
	p.lingers.calls.Add(1)
	linger, gen := p.wake(q), q.linger.gen
	sh.mu.Unlock()
	if linger {
		p.lingers.add(q, gen)
	}
}

// newQueue makes key's queue in sh, whose mutex is held.
func (p *Publisher) newQueue(sh *shard, key string) *keyQueue {
	q := &keyQueue{sh: sh, key: key, unordered: key == ""}
	if p.stamps != nil && key != "" {
		q.counter = sh.counters.take(key, p.stamps)
	}
	sh.keys[key] = q
	sh.peak = max(sh.peak, len(sh.keys))
	return q
}

// wake decides what q, just given a message, waits for: a key with a
// request in flight gathers its messages until it returns (P3); an idle
// one lingers for more, unless its messages reach the thresholds, or the
// publisher is flushing or closing, when it is sent now. It reports
// whether q has just begun to linger, for the caller to add it to the
// lingers once the shard's mutex is let go. sh.mu is held.
func (p *Publisher) wake(q *keyQueue) (linger bool) {
	if q.state == ready || (len(q.inflight) > 0 && !q.unordered) {
		return false
	}
	full := p.full(q)
	if q.state == lingering {
		if full {
			p.makeReady(q)
		}
		return false
	}
	if full || p.lingerFor == 0 || p.flushing.Load() > 0 || p.closing.Load() {
		p.makeReady(q)
		return false
	}
	q.state = lingering
	q.linger.start(p.rec.now())
	return true
}

// full reports whether q's pending messages reach a batch's thresholds
// (WithPublishSettings), or a request's limits. sh.mu is held.
func (p *Publisher) full(q *keyQueue) bool {
	n := len(q.pending)
	return n >= p.countThreshold || (p.byteThreshold > 0 && q.bytes >= p.byteThreshold)
}

// take takes the next request's batch from the head of q's pending: as
// many messages as a request takes (P6), at least one. sh.mu is held.
func (p *Publisher) take(q *keyQueue) []*Result {
	n, size, bytes := 0, 0, int64(0)
	for n < len(q.pending) && n < p.countThreshold {
		r := q.pending[n]
		s := fieldBound(int(r.size))
		if n > 0 && (size+s > p.requestBytes || (p.byteThreshold > 0 && bytes+int64(r.size) > p.byteThreshold)) {
			break
		}
		size += s
		bytes += int64(r.size)
		n++
	}
	batch := q.pending[:n:n]
	if n == len(q.pending) {
		// The batch keeps the array: the next message starts another.
		q.pending, q.bytes = nil, 0
	} else {
		q.pending = q.pending[n:]
		for _, r := range batch {
			q.bytes -= int64(r.size)
		}
	}
	q.inflight = append(q.inflight, batch)
	return batch
}

// settle makes the Results of batch, a request of q that returned with
// ids or err at now, ready, and decides what q does next: send what it
// gathered meanwhile, or, if it has nothing outstanding, be deleted
// (P7). A failure fails the key's tail with it, every message of the key
// not yet published, so a key resumes at once, with the next message
// published (P4, P5). sh.mu is held.
func (p *Publisher) settle(q *keyQueue, batch []*Result, ids []string, err error, now time.Duration) {
	q.dropInflight(batch)
	if err != nil {
		p.fail(q, batch, err, now)
	} else {
		if !q.unordered {
			p.rec.published(q.key)
		}
		for i, r := range batch {
			p.releaseRoom(r)
			r.dropMessage()
			if q.unordered {
				p.rec.counted(outPublished)
			} else {
				p.rec.settled(r, outPublished, now)
			}
			r.resolve(ids[i], nil)
		}
	}
	switch {
	case len(q.pending) > 0 && q.state == idle && (q.unordered || len(q.inflight) == 0):
		// Settled first: a key's Results become ready in order.
		p.makeReady(q)
	case len(q.pending) == 0 && len(q.inflight) == 0 && q.state == idle:
		p.deleteQueue(q)
	}
}

// makeReady puts q in the run queue, for a sender to take its next
// batch. sh.mu is held.
func (p *Publisher) makeReady(q *keyQueue) {
	q.state = ready
	p.run.push(q)
}

// fail fails batch, a request of q that failed with err, and, for a key,
// its tail: every message gathered behind it (P4). Unordered messages
// fail alone. sh.mu is held.
func (p *Publisher) fail(q *keyQueue, batch []*Result, err error, now time.Duration) {
	if q.unordered {
		for _, r := range batch {
			p.releaseRoom(r)
			p.rec.counted(outFailed)
			r.resolve("", &PublishError{Err: err})
		}
		return
	}
	tail := append(batch[1:len(batch):len(batch)], q.pending...)
	p.rec.paused(q.key, batch[0], tail, err)
	p.releaseRoom(batch[0])
	batch[0].resolve("", &PublishError{Key: q.key, Err: err})
	for _, r := range tail {
		p.releaseRoom(r)
		r.resolve("", &PublishError{Key: q.key, Err: err, Skipped: true})
	}
	clear(q.pending)
	q.pending, q.bytes = nil, 0
	if q.state == lingering {
		q.state = idle
	}
	p.rec.resumed()
}

// dropInflight removes batch from q's requests in flight.
func (q *keyQueue) dropInflight(batch []*Result) {
	for i, b := range q.inflight {
		if &b[0] == &batch[0] {
			q.inflight[i] = q.inflight[len(q.inflight)-1]
			q.inflight[len(q.inflight)-1] = nil
			q.inflight = q.inflight[:len(q.inflight)-1]
			return
		}
	}
}

// deleteQueue deletes q from its shard, whose mutex is held (P7), and
// keeps its counter.
func (p *Publisher) deleteQueue(q *keyQueue) {
	sh := q.sh
	if p.stamps != nil && !q.unordered {
		sh.counters.keep(q.key, q.counter, p.counterWindow)
	}
	delete(sh.keys, q.key)
	if len(sh.keys) == 0 && sh.peak > shrinkAt {
		sh.keys, sh.peak = make(map[string]*keyQueue), 0
	}
}

// outstanding returns the Results not yet ready that Flush waits for:
// for a key, its last message, as a key's Results become ready in order;
// for the unordered messages, every one.
func (p *Publisher) outstanding() []*Result {
	var rs []*Result
	for i := range p.shards {
		sh := &p.shards[i]
		sh.mu.Lock()
		for _, q := range sh.keys {
			if q.unordered {
				for _, b := range q.inflight {
					rs = append(rs, b...)
				}
				rs = append(rs, q.pending...)
				continue
			}
			if n := len(q.pending); n > 0 {
				rs = append(rs, q.pending[n-1])
			} else if len(q.inflight) > 0 {
				b := q.inflight[0]
				rs = append(rs, b[len(b)-1])
			}
		}
		sh.mu.Unlock()
	}
	return rs
}

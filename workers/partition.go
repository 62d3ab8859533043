package workers

import (
	"context"
	"sync"
)

// numShards spreads the partitions over this many mutexes, so that
// submitters and runners of different partitions rarely share one. It is a
// power of two: a partition's shard is its index's low bits, and its slot
// in the shard the rest.
const numShards = 64

// maxFree is how many idle partitions a shard keeps for reuse, so that a
// partition that empties and fills again costs no allocation.
const maxFree = 16

// A shard holds the state of the partitions whose index is congruent to
// the shard's index modulo numShards.
type shard struct {
	// mu guards parts, free, closed and every field of the partitions in
	// parts. It is never held while a task, a Drop or the panic handler
	// runs, so those may call back into the pool without deadlock. Lock
	// order: a shard's mu before Pool.mu, never the other way round.
	mu sync.Mutex

	// parts holds the partitions that are busy, by index/numShards: with
	// tasks queued, a task running, a place in the ready queue, or Submits
	// blocked. The slot of an idle partition is nil (see release), so a
	// pool of many partitions costs a pointer per partition, and a
	// partition's state only while it is in use. Made on first use.
	parts []*partition

	// free holds up to maxFree idle partitions for reuse.
	free []*partition

	// closed is set by Close and Stop and never cleared. Once it is set no
	// entry enters a queue of this shard, and waiters stay empty.
	closed bool
}

// partition is one partition of a [Pool]: a bounded FIFO of tasks, run one
// at a time by whichever runner takes it from the ready queue. Every task
// of a key goes to the same partition, so the FIFO and the one-at-a-time
// rule are what order a key's tasks. Every field is guarded by the
// partition's shard mutex.
type partition struct {
	index int

	// queue holds the tasks accepted and not started, oldest first. Only
	// the runner of the partition pops from it; Stop and DropQueued may
	// remove from it.
	queue ring

	// waiters are the Submit calls blocked on a full queue, oldest first.
	// Invariant: waiters is empty unless queue is full. Whoever frees a
	// slot moves the oldest waiter's entry into it and settles the waiter
	// (admitLocked), so blocked Submits enter the queue in the order they
	// blocked, and one freed slot wakes one Submit.
	waiters waitList

	// running is set while a runner runs one of the partition's tasks;
	// ready while the partition sits in the pool's ready queue. Invariant:
	// a partition with a task queued is running or ready, never both, so
	// its tasks run one at a time and none is forgotten.
	running bool
	ready   bool
}

// idle reports whether the partition holds nothing and no runner or ready
// queue refers to it, so that it can leave its shard's map.
func (q *partition) idle() bool {
	return q.queue.len() == 0 && !q.running && !q.ready && q.waiters.head == nil
}

// lookup returns the partition of index if it is busy, or nil. sh.mu must
// be held.
func (sh *shard) lookup(index int) *partition {
	if sh.parts == nil {
		return nil
	}
	return sh.parts[index/numShards]
}

// get returns the partition of index, taking a free one or making one if it
// is not busy. sh.mu must be held.
func (sh *shard) get(index, n, queueSize int) *partition {
	if sh.parts == nil {
		sh.parts = make([]*partition, (n+numShards-1)/numShards)
	}
	if q := sh.parts[index/numShards]; q != nil {
		return q
	}
	var q *partition
	if n := len(sh.free); n > 0 {
		q, sh.free = sh.free[n-1], sh.free[:n-1]
	} else {
		q = &partition{queue: ring{limit: queueSize}}
	}
	q.index = index
	sh.parts[index/numShards] = q
	return q
}

// release takes q out of the shard if it is idle, keeping it for reuse.
// sh.mu must be held.
func (sh *shard) release(q *partition) {
	if !q.idle() || sh.parts[q.index/numShards] != q {
		return
	}
	sh.parts[q.index/numShards] = nil
	if len(sh.free) < maxFree {
		q.queue.reset()
		sh.free = append(sh.free, q)
	}
}

// submit queues e on q, waiting while the queue is full. It is called with
// sh.mu held and returns with it released. See [Pool.SubmitTask].
func (p *Pool) submit(ctx context.Context, sh *shard, q *partition, e entry) error {
	if !q.queue.full() {
		q.queue.push(e)
		if !q.running && !q.ready {
			p.makeReady(q)
		}
		sh.mu.Unlock()
		return nil
	}
	w := &waiter{entry: e, ready: make(chan struct{})}
	q.waiters.push(w)
	sh.mu.Unlock()

	select {
	case <-w.ready:
		return w.err
	case <-ctx.Done():
	}
	sh.mu.Lock()
	defer sh.mu.Unlock()
	select {
	case <-w.ready:
		// Settled between ctx ending and taking mu: if it was admitted,
		// the task is queued and will run, so report that.
		return w.err
	default:
		q.waiters.remove(w) // the queue is as it was before this call
		sh.release(q)
		return ctx.Err()
	}
}

// admitLocked moves blocked Submits into free slots of the queue, oldest
// first. The shard's mu must be held.
func (q *partition) admitLocked() {
	for !q.queue.full() {
		w := q.waiters.pop()
		if w == nil {
			return
		}
		q.queue.push(w.entry)
		close(w.ready) // w.err stays nil: admitted
	}
}

// shutLocked closes q's blocked Submits with ErrClosed and, if drop is
// true, takes every queued task out and appends it to out, oldest first,
// for the caller to drop. The shard's mu must be held.
func (q *partition) shutLocked(drop bool, out []entry) []entry {
	for w := q.waiters.pop(); w != nil; w = q.waiters.pop() {
		w.err = ErrClosed
		close(w.ready)
	}
	if drop {
		out = q.queue.remove(func(entry) bool { return true }, out)
	}
	return out
}

// drop calls the Drop of each entry, in order, on the calling goroutine.
func (p *Pool) drop(entries []entry) {
	for _, e := range entries {
		invoke(e.key, e.task.Drop, p.cfg.onPanic)
	}
}

package workers

import (
	"runtime/debug"

	"github.com/keyorder/keyorder/internal/fifo"
)

// Runners are the goroutines that run tasks. A partition with a task to run
// and no runner sits in the pool's ready queue; a runner takes the oldest
// ready partition, runs its oldest task, and then either goes on with the
// same partition, if no other partition is waiting, or puts it at the back
// of the ready queue and takes the next. A partition therefore runs one
// task at a time, in order, and a long task holds one runner and its own
// partition, never the others (S9).
//
// Runners start on demand, up to the pool's concurrency, and wait for work
// when there is none, so that a busy pool costs no goroutine start per
// task. A partition that turns ready while a runner waits is handed to
// that runner directly, without the ready queue. Runners exit when the
// pool is closed and nothing is ready.
//
// This file holds the run path: the runners, the Task they run, and the
// partitions they take, with their queues. pool.go holds the Pool, its
// shards of partitions and the submit path.

// A runner is one runner goroutine's mailbox while it waits for work.
type runner struct {
	// wake receives the partition handed to the runner, or nil when the
	// pool closes. Capacity 1: a runner on the idle list has nothing in
	// it, so a hand-off never blocks.
	wake chan *partition
}

// makeReady puts q, which has a task queued and is neither running nor
// ready, in the ready queue, and wakes or starts a runner for it if one is
// free. q's shard mutex must be held.
func (p *Pool) makeReady(q *partition) {
	q.ready = true
	p.mu.Lock()
	if n := len(p.idle); n > 0 {
		r := p.idle[n-1]
		p.idle = p.idle[:n-1]
		p.mu.Unlock()
		r.wake <- q
		return
	}
	p.ready.Push(q)
	p.waiting.Store(int32(p.ready.Len()))
	if p.live < p.cfg.concurrency {
		p.live++
		go p.run()
	}
	p.mu.Unlock()
}

// run is a runner goroutine.
//
// A task that calls runtime.Goexit ends the goroutine, as no recover stops
// Goexit; the deferred function then settles the partition and starts a
// replacement runner, so that the pool keeps its runners and the
// partition's later tasks still run or drop.
func (p *Pool) run() {
	r := &runner{wake: make(chan *partition, 1)}
	var q *partition // the partition whose task is running
	defer func() {
		if q != nil {
			sh := p.shardOf(q.index)
			sh.mu.Lock()
			p.done1(sh, q)
			sh.mu.Unlock()
			go p.run() // takes this runner's place in live
		}
	}()
	var e entry
	var ok bool
	for {
		if q == nil {
			if q, e, ok = p.take(r); !ok {
				return
			}
		}
		invoke(e.key, e.task.Run, p.cfg.onPanic)
		q, e = p.after(q)
	}
}

// take waits for a ready partition and starts its oldest task. It returns
// false once the pool is closed and nothing is ready: the runner exits.
func (p *Pool) take(r *runner) (*partition, entry, bool) {
	for {
		p.mu.Lock()
		q, ok := p.ready.Pop()
		p.waiting.Store(int32(p.ready.Len()))
		switch {
		case ok:
			p.mu.Unlock()
		case p.closed:
			p.exitLocked()
			p.mu.Unlock()
			return nil, entry{}, false
		default:
			p.idle = append(p.idle, r)
			p.mu.Unlock()
			if q = <-r.wake; q == nil { // closed
				p.mu.Lock()
				p.exitLocked()
				p.mu.Unlock()
				return nil, entry{}, false
			}
		}
		sh := p.shardOf(q.index)
		sh.mu.Lock()
		q.ready = false
		if q.queue.len() > 0 {
			e := q.start()
			sh.mu.Unlock()
			return q, e, true
		}
		// Stop or DropQueued emptied it while it waited.
		sh.release(q)
		sh.mu.Unlock()
	}
}

// exitLocked counts off an exiting runner. p.mu must be held.
func (p *Pool) exitLocked() {
	p.live--
	if p.live == 0 {
		p.closeDoneLocked()
	}
}

// after ends the task of q that just ran. If q has another task and no
// other partition is waiting, it starts that task and returns q; otherwise
// it requeues q if it has work and returns nil, so that the runner takes
// the next ready partition.
func (p *Pool) after(q *partition) (*partition, entry) {
	sh := p.shardOf(q.index)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	// waiting is read without p.mu: a partition that turns ready just
	// after the read is taken by another runner, or by this one after
	// q's next task.
	if q.queue.len() > 0 && p.waiting.Load() == 0 {
		return q, q.start()
	}
	p.done1(sh, q)
	return nil, entry{}
}

// done1 marks q's running task finished: q goes back to the ready queue
// if it has more, or leaves its shard if it is idle. sh.mu must be held.
func (p *Pool) done1(sh *shard, q *partition) {
	q.running = false
	if q.queue.len() > 0 {
		p.makeReady(q)
		return
	}
	sh.release(q)
}

// start takes q's oldest task to run it. The shard mutex must be held.
func (q *partition) start() entry {
	e := q.queue.pop()
	q.admitLocked()
	q.running = true
	return e
}

// closeDoneLocked closes done once. p.mu must be held.
func (p *Pool) closeDoneLocked() {
	if !p.stopped {
		p.stopped = true
		close(p.done)
	}
}

// A Task is work that wants to know when the pool gives up on it. Once
// [Pool.SubmitTask] has returned nil for a task, the pool calls exactly one
// of its methods, exactly once.
//
// A type with a pointer receiver, such as a subscriber's record of one
// delivery, implements Task without an allocation per submit, which a
// closure would cost.
type Task interface {
	// Run does the work. It runs on the goroutine of the task's partition,
	// after every task submitted to that partition before it has returned
	// or been dropped.
	Run()

	// Drop is called instead of Run when the pool discards the task before
	// it started: by [Pool.Stop], by [Pool.Close] whose ctx ended, or by
	// [Pool.DropQueued]. It runs on the goroutine that called that method,
	// before the method returns. A subscriber nacks the message here (S5,
	// S7). Drop must not block for long, and must not wait for a task of
	// the same pool.
	Drop()
}

// funcTask adapts the func of [Pool.Submit] to [Task]. A func value is one
// pointer, so converting it to the interface does not allocate.
type funcTask func()

func (f funcTask) Run()  { f() }
func (f funcTask) Drop() {}

// entry is one accepted task and the key it was submitted with, which the
// panic handler is told.
type entry struct {
	key  string
	task Task
}

// invoke calls f, the Run or Drop of a task of key. A panic in f is
// recovered and reported to onPanic, so that it kills neither the partition
// nor the process. (runtime.Goexit is not a panic: partition.run deals with
// it.)
func invoke(key string, f func(), onPanic func(string, any, []byte)) {
	defer func() {
		// Since Go 1.21 panic(nil) recovers a *runtime.PanicNilError, so
		// a nil r means f returned normally.
		if r := recover(); r != nil {
			onPanic(key, r, debug.Stack())
		}
	}()
	f()
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

// ring is a partition's bounded FIFO of entries. Its buffer grows by
// doubling as it fills, up to limit entries, so a partition that rarely
// queues more than a few tasks costs a few entries, not its bound. It is
// not safe for concurrent use: its partition's shard mutex guards it.
type ring struct {
	q     fifo.Queue[entry]
	limit int // the most entries it holds: the queue size
}

// maxKeptRing is the largest buffer reset keeps for reuse; a larger one is
// let go, so that a burst does not pin its peak memory.
const maxKeptRing = 64

func (r *ring) len() int     { return r.q.Len() }
func (r *ring) full() bool   { return r.q.Len() >= r.limit }
func (r *ring) push(e entry) { r.q.Push(e) } // the caller checks that r is not full
func (r *ring) reset()       { r.q.Shrink(maxKeptRing) }
func (r *ring) pop() entry   { e, _ := r.q.Pop(); return e } // the caller checks that r is not empty

// remove takes out every entry for which match is true, keeping the others
// in order, and appends the removed ones to out, oldest first.
func (r *ring) remove(match func(entry) bool, out []entry) []entry {
	return r.q.RemoveFunc(match, out)
}

// waiter is a Submit blocked on a full queue, holding the entry it wants
// to queue.
type waiter struct {
	entry
	// ready is closed, under the partition's mutex, when the waiter is
	// settled: err is nil if its entry was moved into the queue, ErrClosed
	// if the pool closed first. err is written before ready is closed, so
	// reading it after receiving from ready is safe.
	ready chan struct{}
	err   error

	prev, next *waiter // links in the waitList
}

// waitList is a FIFO of waiters that also removes from the middle, for a
// Submit whose ctx ends. It is not safe for concurrent use: its partition's
// mutex guards it.
type waitList struct {
	head, tail *waiter
}

func (l *waitList) push(w *waiter) {
	w.prev, w.next = l.tail, nil
	if l.tail == nil {
		l.head = w
	} else {
		l.tail.next = w
	}
	l.tail = w
}

// pop removes and returns the oldest waiter, or nil if there is none.
func (l *waitList) pop() *waiter {
	w := l.head
	if w != nil {
		l.remove(w)
	}
	return w
}

// remove unlinks w, which must be in l.
func (l *waitList) remove(w *waiter) {
	if w.prev == nil {
		l.head = w.next
	} else {
		w.prev.next = w.next
	}
	if w.next == nil {
		l.tail = w.prev
	} else {
		w.next.prev = w.prev
	}
	w.prev, w.next = nil, nil
}

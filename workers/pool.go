package workers

import (
	"context"
	"sync"
	"sync/atomic"

	"github.com/keyorder/keyorder/internal/fifo"
	"github.com/keyorder/keyorder/ordering"
)

// Pool runs tasks on n key-hashed partitions, over at most a given number
// of goroutines. A task with a non-empty key goes to partition
// [ordering.Partition](key, n). The tasks of one partition never run at
// once, and they run in the order they were submitted, so the tasks of a
// key run one at a time, in submit order. Different partitions run in
// parallel, up to the pool's concurrency ([WithConcurrency]; n by
// default). Tasks with the empty key are spread over the partitions in
// turn.
//
// A partition is not a goroutine: runners take whichever partition has a
// task ready, oldest first, so a long task holds its own partition and one
// runner, and delays only the keys of that partition (S9). Partitions cost
// memory only while they have work, so n may be large: with many
// partitions, few keys share one.
//
// A Pool is safe for concurrent use. [Pool.Close] or [Pool.Stop] must be
// called for its goroutines to exit.
//
// A task costs a few mutex-guarded operations on its partition and the
// ready queue: about 150 ns for Submit plus run on a 2-core machine, with
// no allocation by the pool once its runners have started, where a
// goroutine per task with a mutex per key costs about 450 ns and 2
// allocations (BenchmarkOverhead).
type Pool struct {
	n   int    // partitions; set by New
	cfg config // set by New

	// shards hold the partitions' state, by index modulo numShards; each
	// guards its own.
	shards [numShards]shard

	// next is the round-robin cursor for tasks with the empty key.
	next atomic.Uint64

	// mu guards the fields below. Lock order: a shard's mu, then mu.
	mu sync.Mutex
	// ready holds the partitions with a task queued that no runner has
	// taken, oldest first.
	ready fifo.Queue[*partition]
	// waiting is ready.Len(), stored under mu and read without it.
	waiting atomic.Int32
	// idle holds the runners waiting for work, the last to wait first.
	idle []*runner
	// live counts the runner goroutines. It only grows, up to
	// cfg.concurrency, until the pool is closed.
	live int
	// closed is set by Close and Stop; runners exit once it is set and
	// nothing is ready. The one that brings live to zero closes done, or
	// shut does if there are none; stopped records that done is closed.
	closed  bool
	stopped bool
	done    chan struct{}
}

// New returns a pool of n partitions. n is 1 to 65,536; any other value
// returns an error matching [ErrInvalidConfig], as does an option out of
// range. No goroutine starts until a task is submitted.
func New(n int, opts ...Option) (*Pool, error) {
	cfg, err := newConfig(n, opts)
	if err != nil {
		return nil, err
	}
	return &Pool{n: n, cfg: cfg, done: make(chan struct{})}, nil
}

func (p *Pool) shardOf(index int) *shard { return &p.shards[index&(numShards-1)] }

// Partition returns the partition that tasks of key run on: the pinned
// [ordering.Partition](key, n), so it agrees with any other process using
// the same n. It returns -1 for the empty key, whose tasks are not pinned.
//
// The tasks of one partition never run at once, so state indexed by
// Partition and touched only by that partition's tasks needs no lock.
func (p *Pool) Partition(key string) int {
	if key == "" {
		return -1
	}
	return ordering.Partition(key, p.n)
}

// Submit queues task to run on the partition of key. It is [Pool.SubmitTask]
// for a task with nothing to do when dropped: use SubmitTask to learn that
// a task did not run.
//
// It panics if task is nil, as that is a programming error better reported
// at the call than when the partition reaches it.
func (p *Pool) Submit(ctx context.Context, key string, task func()) error {
	if task == nil {
		panic("workers: Submit with a nil task")
	}
	return p.SubmitTask(ctx, key, funcTask(task))
}

// SubmitTask queues t to run on the partition of key (see
// [Pool.Partition]; the empty key takes the next partition in turn).
//
// It blocks while that partition's queue is full. It returns nil once t is
// queued; from then on the pool calls exactly one of t.Run and t.Drop, once.
// It returns ctx.Err() if ctx ends before t is queued, including when ctx is
// already done, and [ErrClosed] once Close or Stop has been called; in both
// cases t is not queued and the queue is left as it was. Submits blocked on
// one full queue enter it in the order they blocked.
//
// Order: if one SubmitTask for a key returns before another for that key
// starts, the first task is run or dropped before the second's Run starts.
// Tasks with the empty key have no order. What the caller did before
// SubmitTask happens before t.Run or t.Drop starts, and a task's Run
// returning happens before the next task of its partition starts.
//
// A task must not submit to its own partition without a ctx that ends, as
// it would wait for a slot only it can free.
//
// It panics if t is nil.
func (p *Pool) SubmitTask(ctx context.Context, key string, t Task) error {
	if t == nil {
		panic("workers: SubmitTask with a nil Task")
	}
	select {
	case <-ctx.Done():
		return ctx.Err()
	default:
	}
	index := p.index(key)
	sh := p.shardOf(index)
	sh.mu.Lock()
	if sh.closed {
		sh.mu.Unlock()
		return ErrClosed
	}
	return p.submit(ctx, sh, sh.get(index, p.n, p.cfg.queueSize), entry{key: key, task: t})
}

// index is the partition for a task of key.
func (p *Pool) index(key string) int {
	if key == "" {
		return int((p.next.Add(1) - 1) % uint64(p.n))
	}
	return ordering.Partition(key, p.n)
}

// DropQueued drops every task of key that is queued on its partition and
// has not started: it calls their Drop, oldest first, on the calling
// goroutine, and returns how many there were. A running task is not
// affected, nor are tasks that enter the queue afterwards, Submits that
// were blocked on the full queue included. The empty key is not pinned to a partition, so DropQueued("") drops
// nothing and returns 0.
//
// It exists for S5: when a task of a key fails for good, the subscriber
// calls DropQueued from that task to nack the key's tail at once, without
// running it and without waiting for it to reach the front of a queue it
// shares with other keys. Holding back the key's later tasks is the
// caller's job.
func (p *Pool) DropQueued(key string) int {
	if key == "" {
		return 0
	}
	index := p.Partition(key)
	sh := p.shardOf(index)
	sh.mu.Lock()
	var dropped []entry
	if q := sh.lookup(index); q != nil {
		dropped = q.queue.remove(func(e entry) bool { return e.key == key }, nil)
		q.admitLocked()
		sh.release(q)
	}
	sh.mu.Unlock()
	p.drop(dropped)
	return len(dropped)
}

// Close stops accepting tasks, runs every task already queued, and waits
// for the running tasks to return and every partition goroutine to exit.
// Submits blocked on a full queue return [ErrClosed].
//
// Close is bounded by ctx. If ctx ends first, Close drops every task still
// queued, calling its Drop before it returns, and returns ctx.Err(). Tasks
// running at that moment carry on, and their partitions exit when they
// return; a later Close or Stop waits for that again.
//
// When Close returns nil, every accepted task has been run or dropped, and
// their effects are visible to the caller. Close is idempotent: once the
// pool has stopped it returns nil at once. Calling it from a task waits for that task's own partition, so only ctx
// can end the wait.
func (p *Pool) Close(ctx context.Context) error {
	p.shut(false)
	if err := p.wait(ctx); err != nil {
		p.shut(true)
		return err
	}
	return nil
}

// Stop stops accepting tasks and drops every queued task, calling its Drop
// on the calling goroutine before it waits. Then it waits, bounded by ctx,
// for the running tasks to return and every partition goroutine to exit,
// and returns ctx.Err() if ctx ends first; running tasks carry on, and a
// later Close or Stop waits again.
//
// It exists for S7: at shutdown a subscriber nacks what is queued and not
// started, and lets the running handlers finish, bounded by its drain
// timeout. Stop after Close drops what Close has not run yet; both are
// idempotent, and when either returns nil every accepted task has been run
// or dropped.
func (p *Pool) Stop(ctx context.Context) error {
	p.shut(true)
	return p.wait(ctx)
}

// shut closes every partition: no task is accepted from now on, and
// Submits blocked on a full queue return ErrClosed. If drop is true it
// also drops every queued task, oldest first within each partition;
// otherwise the runners run them before they exit.
func (p *Pool) shut(drop bool) {
	var dropped []entry
	for i := range p.shards {
		sh := &p.shards[i]
		sh.mu.Lock()
		sh.closed = true
		for _, q := range sh.parts {
			if q != nil {
				dropped = q.shutLocked(drop, dropped)
				sh.release(q)
			}
		}
		sh.mu.Unlock()
	}
	p.mu.Lock()
	p.closed = true
	if p.live == 0 {
		p.closeDoneLocked()
	}
	idle := p.idle // they must see closed
	p.idle = nil
	p.mu.Unlock()
	for _, r := range idle {
		r.wake <- nil
	}
	p.drop(dropped)
}

// wait waits for every partition goroutine to exit, or for ctx to end.
func (p *Pool) wait(ctx context.Context) error {
	select {
	case <-p.done: // already stopped: nil even if ctx is done
		return nil
	default:
	}
	select {
	case <-p.done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

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

// drop calls the Drop of each entry, in order, on the calling goroutine.
func (p *Pool) drop(entries []entry) {
	for _, e := range entries {
		invoke(e.key, e.task.Drop, p.cfg.onPanic)
	}
}

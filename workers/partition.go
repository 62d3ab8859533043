package workers

import (
	"context"
	"sync"
)

// partition is one worker of a [Pool]: a bounded FIFO of tasks and the one
// goroutine that runs them. Every task of a key goes to the same partition,
// so the FIFO and the single goroutine are what order a key's tasks.
type partition struct {
	// mu guards queue, waiters and closed. It is never held while a task,
	// a Drop or the panic handler runs, so those may call back into the
	// pool without deadlock.
	mu sync.Mutex

	// queue holds the tasks accepted and not started, oldest first. Only
	// the partition goroutine pops from it; Stop and DropQueued may remove
	// from it.
	queue ring

	// waiters are the Submit calls blocked on a full queue, oldest first.
	// Invariant: waiters is empty unless queue is full. Whoever frees a
	// slot moves the oldest waiter's entry into it and settles the waiter
	// (admitLocked), so blocked Submits enter the queue in the order they
	// blocked, and one freed slot wakes one Submit.
	waiters waitList

	// closed is set by Close and Stop and never cleared. Once it is set no
	// entry enters queue and waiters stays empty, so the queue only drains.
	closed bool

	// nonEmpty, on mu, wakes the partition goroutine, its only waiter,
	// when the queue stops being empty or closed is set.
	nonEmpty sync.Cond

	// onPanic is set by New and never changes.
	onPanic func(key string, recovered any, stack []byte)
}

func newPartition(queueSize int, onPanic func(string, any, []byte)) *partition {
	q := &partition{queue: newRing(queueSize), onPanic: onPanic}
	q.nonEmpty.L = &q.mu
	return q
}

// run is the partition goroutine: it runs queued tasks one at a time until
// the partition is closed and its queue is empty, then calls exited.
//
// A task that calls runtime.Goexit ends the goroutine, as no recover stops
// Goexit; run then hands the partition to a new goroutine, so that the
// partition carries on and its queued tasks are still run or dropped.
func (q *partition) run(exited func()) {
	finished := false
	defer func() {
		if finished {
			exited()
		} else {
			go q.run(exited)
		}
	}()
	for {
		e, ok := q.next()
		if !ok {
			finished = true
			return
		}
		invoke(e.key, e.task.Run, q.onPanic)
	}
}

// next waits for the oldest queued entry and takes it out of the queue. It
// returns false once the partition is closed and nothing is queued.
func (q *partition) next() (entry, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for q.queue.len() == 0 {
		if q.closed {
			return entry{}, false
		}
		q.nonEmpty.Wait()
	}
	e := q.queue.pop()
	q.admitLocked()
	return e, true
}

// submit queues e, waiting while the queue is full. See [Pool.SubmitTask].
func (q *partition) submit(ctx context.Context, e entry) error {
	q.mu.Lock()
	if q.closed {
		q.mu.Unlock()
		return ErrClosed
	}
	if !q.queue.full() {
		q.queue.push(e)
		wasEmpty := q.queue.len() == 1
		q.mu.Unlock()
		if wasEmpty {
			q.nonEmpty.Signal()
		}
		return nil
	}
	w := &waiter{entry: e, ready: make(chan struct{})}
	q.waiters.push(w)
	q.mu.Unlock()

	select {
	case <-w.ready:
		return w.err
	case <-ctx.Done():
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	select {
	case <-w.ready:
		// Settled between ctx ending and taking mu: if it was admitted,
		// the task is queued and will run, so report that.
		return w.err
	default:
		q.waiters.remove(w) // the queue is as it was before this call
		return ctx.Err()
	}
}

// admitLocked moves blocked Submits into free slots of the queue, oldest
// first. q.mu must be held.
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

// shut closes the partition: no task is accepted from now on, and Submits
// blocked on the full queue return ErrClosed. If drop is true it also takes
// every queued task out and returns them, oldest first, for the caller to
// drop; otherwise the partition goroutine runs them before it exits.
func (q *partition) shut(drop bool) []entry {
	q.mu.Lock()
	q.closed = true
	for w := q.waiters.pop(); w != nil; w = q.waiters.pop() {
		w.err = ErrClosed
		close(w.ready)
	}
	var dropped []entry
	if drop {
		dropped = q.queue.remove(func(entry) bool { return true }, nil)
	}
	q.mu.Unlock()
	q.nonEmpty.Signal() // an idle partition goroutine must see closed
	return dropped
}

// removeKey takes every queued task of key out of the queue and returns
// them, oldest first, for the caller to drop. Blocked Submits move into the
// freed slots. No signal is needed: the partition goroutine waits only on an
// empty queue, and then there is nothing to remove and no one blocked.
func (q *partition) removeKey(key string) []entry {
	q.mu.Lock()
	defer q.mu.Unlock()
	dropped := q.queue.remove(func(e entry) bool { return e.key == key }, nil)
	q.admitLocked()
	return dropped
}

// drop calls the Drop of each entry, in order, on the calling goroutine.
func (q *partition) drop(entries []entry) {
	for _, e := range entries {
		invoke(e.key, e.task.Drop, q.onPanic)
	}
}

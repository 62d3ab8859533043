package workers

import "github.com/keyorder/keyorder/internal/fifo"

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

package workers

// ring is a bounded FIFO of entries over a buffer allocated once. It is not
// safe for concurrent use: its partition's mutex guards it.
type ring struct {
	buf  []entry
	head int // index in buf of the oldest entry
	n    int // number of entries
}

func newRing(size int) ring { return ring{buf: make([]entry, size)} }

func (r *ring) len() int   { return r.n }
func (r *ring) full() bool { return r.n == len(r.buf) }

// at returns the index in buf of the i-th oldest entry, for 0 <= i < len(buf).
func (r *ring) at(i int) int {
	j := r.head + i
	if j >= len(r.buf) {
		j -= len(r.buf)
	}
	return j
}

// push appends e. The caller checks that r is not full.
func (r *ring) push(e entry) {
	r.buf[r.at(r.n)] = e
	r.n++
}

// pop removes and returns the oldest entry. The caller checks that r is not
// empty.
func (r *ring) pop() entry {
	e := r.buf[r.head]
	r.buf[r.head] = entry{} // let the task be collected once it has run
	r.head = r.at(1)
	r.n--
	return e
}

// remove takes out every entry for which match is true, keeping the others
// in order, and appends the removed ones to out, oldest first.
func (r *ring) remove(match func(entry) bool, out []entry) []entry {
	kept := 0
	for i := 0; i < r.n; i++ {
		e := r.buf[r.at(i)]
		if match(e) {
			out = append(out, e)
			continue
		}
		r.buf[r.at(kept)] = e // kept <= i: never overwrites an unread entry
		kept++
	}
	for i := kept; i < r.n; i++ {
		r.buf[r.at(i)] = entry{}
	}
	r.n = kept
	return out
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

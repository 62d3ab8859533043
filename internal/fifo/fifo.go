// Package fifo provides Queue, a first-in, first-out queue on a ring
// buffer that grows by doubling and never holds more than it needs to.
package fifo

// minCap is the buffer a Queue starts with on its first push.
const minCap = 4

// A Queue is a FIFO of T on a ring buffer. The zero value is an empty
// queue. It is not safe for concurrent use: its owner's mutex guards it.
//
// Push, PushFront and Pop cost O(1), amortised over the doublings of the
// buffer; a Queue that is drained and filled again reuses its buffer.
type Queue[T any] struct {
	buf  []T
	head int // index in buf of the oldest item
	n    int // number of items
}

// Len returns the number of items.
func (q *Queue[T]) Len() int { return q.n }

// at returns the index in buf of the i-th oldest item, 0 <= i < len(buf).
func (q *Queue[T]) at(i int) int {
	j := q.head + i
	if j >= len(q.buf) {
		j -= len(q.buf)
	}
	return j
}

// grow doubles the buffer, keeping the items in order.
func (q *Queue[T]) grow() {
	buf := make([]T, max(minCap, 2*len(q.buf)))
	for i := 0; i < q.n; i++ {
		buf[i] = q.buf[q.at(i)]
	}
	q.buf, q.head = buf, 0
}

// Push appends v at the back.
func (q *Queue[T]) Push(v T) {
	if q.n == len(q.buf) {
		q.grow()
	}
	q.buf[q.at(q.n)] = v
	q.n++
}

// PushFront puts v in front of every item, to be popped next.
func (q *Queue[T]) PushFront(v T) {
	if q.n == len(q.buf) {
		q.grow()
	}
	q.head = q.at(len(q.buf) - 1)
	q.buf[q.head] = v
	q.n++
}

// Insert puts v at position i, 0 <= i <= Len, so that it is the i-th
// oldest item: Insert(0, v) is PushFront(v), and Insert(Len(), v) is
// Push(v). It costs O(1) at either end, and moves the items on the
// shorter side of i otherwise.
func (q *Queue[T]) Insert(i int, v T) {
	if i < 0 || i > q.n {
		panic("fifo: index out of range")
	}
	if q.n == len(q.buf) {
		q.grow()
	}
	if i < q.n-i {
		// Move the i oldest items one place towards the front.
		q.head = q.at(len(q.buf) - 1)
		for k := 0; k < i; k++ {
			q.buf[q.at(k)] = q.buf[q.at(k+1)]
		}
	} else {
		// Move the items from i on one place towards the back.
		for k := q.n; k > i; k-- {
			q.buf[q.at(k)] = q.buf[q.at(k-1)]
		}
	}
	q.buf[q.at(i)] = v
	q.n++
}

// Pop removes and returns the oldest item; ok is false if q is empty.
func (q *Queue[T]) Pop() (v T, ok bool) {
	if q.n == 0 {
		return v, false
	}
	v = q.buf[q.head]
	var zero T
	q.buf[q.head] = zero // let the garbage collector have it
	q.head = q.at(1)
	q.n--
	return v, true
}

// At returns the i-th oldest item, 0 <= i < Len.
func (q *Queue[T]) At(i int) T {
	if i < 0 || i >= q.n {
		panic("fifo: index out of range")
	}
	return q.buf[q.at(i)]
}

// RemoveFunc takes out every item for which match is true, keeping the
// others in order, and appends the removed ones to out, oldest first.
func (q *Queue[T]) RemoveFunc(match func(T) bool, out []T) []T {
	kept := 0
	for i := 0; i < q.n; i++ {
		v := q.buf[q.at(i)]
		if match(v) {
			out = append(out, v)
			continue
		}
		q.buf[q.at(kept)] = v // kept <= i: never overwrites an unread item
		kept++
	}
	var zero T
	for i := kept; i < q.n; i++ {
		q.buf[q.at(i)] = zero
	}
	q.n = kept
	return out
}

// Truncate removes every item from the i-th oldest on, and appends them to
// out, oldest first.
func (q *Queue[T]) Truncate(i int, out []T) []T {
	var zero T
	for j := i; j < q.n; j++ {
		k := q.at(j)
		out = append(out, q.buf[k])
		q.buf[k] = zero
	}
	q.n = min(q.n, max(i, 0))
	return out
}

// Shrink lets the buffer go if q is empty and its buffer holds more than
// keep items, so that a burst does not pin its peak memory.
func (q *Queue[T]) Shrink(keep int) {
	if q.n == 0 && len(q.buf) > keep {
		q.buf, q.head = nil, 0
	}
}

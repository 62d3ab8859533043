package orderingtest

// fifo is a first-in, first-out queue. The zero value is an empty queue.
// It is not safe for concurrent use: every fifo in this package is guarded
// by Server.mu.
type fifo[T any] struct {
	items []T
	head  int // items[:head] have been popped
}

func (q *fifo[T]) len() int { return len(q.items) - q.head }

func (q *fifo[T]) push(v T) { q.items = append(q.items, v) }

// peek returns the oldest item without removing it.
func (q *fifo[T]) peek() (T, bool) {
	if q.len() == 0 {
		var zero T
		return zero, false
	}
	return q.items[q.head], true
}

func (q *fifo[T]) pop() (T, bool) {
	v, ok := q.peek()
	if !ok {
		return v, false
	}
	var zero T
	q.items[q.head] = zero // let the garbage collector have it
	q.head++
	if q.head == len(q.items) {
		q.items, q.head = q.items[:0], 0
	}
	return v, true
}

// all returns the queued items, oldest first, without removing them.
func (q *fifo[T]) all() []T { return q.items[q.head:] }

func (q *fifo[T]) clear() { q.items, q.head = nil, 0 }

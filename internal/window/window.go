// Package window remembers a value for each of the last n message IDs: a
// bounded memory of recent messages, whatever their number.
package window

import "sync"

// A Window remembers a value for each of the last size message IDs put in
// it, forgetting the oldest once full. The zero value, or size 0,
// remembers nothing. It is safe for concurrent use.
//
// Each entry costs about 100 bytes, so memory is bounded by the size,
// whatever the number of keys or messages. A Receive keeps two: the IDs
// of processed messages (S6), and the attempts of messages that failed
// and have not succeeded yet; the control log keeps one, of the events it
// has applied.
type Window[V any] struct {
	size int // set once
	mu   sync.Mutex
	m    map[string]V // guarded by mu
	// ring holds the IDs in the order they were first put, the oldest at
	// next once full. An ID deleted from m stays in ring until its slot is
	// reused; evicting it then is a no-op, or forgets the same ID put
	// again meanwhile a little early, which only bounds memory sooner.
	ring []string // guarded by mu
	next int      // guarded by mu
}

// New returns a window of size IDs.
func New[V any](size int) *Window[V] {
	if size == 0 {
		return &Window[V]{}
	}
	return &Window[V]{size: size, m: make(map[string]V, min(size, 1024)), ring: make([]string, 0, min(size, 1024))}
}

// Update sets the value of id to f of its current value (the zero value if
// id is not remembered), remembering id if it is new, and returns the new
// value. It remembers nothing if the window is off.
func (w *Window[V]) Update(id string, f func(V) V) V {
	if w.size == 0 {
		var zero V
		return f(zero)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	old, ok := w.m[id]
	v := f(old)
	if ok {
		w.m[id] = v
		return v
	}
	if len(w.ring) < w.size {
		w.ring = append(w.ring, id)
	} else {
		delete(w.m, w.ring[w.next])
		w.ring[w.next] = id
		w.next = (w.next + 1) % len(w.ring)
	}
	w.m[id] = v
	return v
}

// Get returns the value of id and whether it is remembered.
func (w *Window[V]) Get(id string) (V, bool) {
	var zero V
	if w.size == 0 {
		return zero, false
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	v, ok := w.m[id]
	return v, ok
}

// Delete forgets id.
func (w *Window[V]) Delete(id string) {
	if w.size == 0 {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	delete(w.m, id)
}

// Len returns the number of IDs remembered.
func (w *Window[V]) Len() int {
	if w.size == 0 {
		return 0
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.m)
}

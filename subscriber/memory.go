package subscriber

import "sync"

// window remembers a value for each of the last size message IDs put in
// it, forgetting the oldest once full. The zero value, or size 0,
// remembers nothing. It is safe for concurrent use.
//
// Receive keeps two: the IDs of processed messages (S6), and the attempts
// of messages that failed and have not succeeded yet. Each entry costs
// about 100 bytes, so memory is bounded by the size, whatever the number
// of keys or messages.
type window[V any] struct {
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

func newWindow[V any](size int) *window[V] {
	if size == 0 {
		return &window[V]{}
	}
	return &window[V]{size: size, m: make(map[string]V, min(size, 1024)), ring: make([]string, 0, min(size, 1024))}
}

// update sets the value of id to f of its current value (the zero value if
// id is not remembered), remembering id if it is new, and returns the new
// value. It remembers nothing if the window is off.
func (w *window[V]) update(id string, f func(V) V) V {
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

// get returns the value of id and whether it is remembered.
func (w *window[V]) get(id string) (V, bool) {
	var zero V
	if w.size == 0 {
		return zero, false
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	v, ok := w.m[id]
	return v, ok
}

// delete forgets id.
func (w *window[V]) delete(id string) {
	if w.size == 0 {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	delete(w.m, id)
}

// len returns the number of IDs remembered.
func (w *window[V]) len() int {
	if w.size == 0 {
		return 0
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.m)
}

// processed remembers the IDs of the last n messages processed (S6).
type processed struct{ w *window[struct{}] }

func newProcessed(n int) processed { return processed{newWindow[struct{}](n)} }

func (p processed) add(id string) {
	p.w.update(id, func(struct{}) struct{} { return struct{}{} })
}

func (p processed) contains(id string) bool {
	_, ok := p.w.get(id)
	return ok
}

// attempts counts, per message, the handler calls and the failures that
// count against [WithMaxAttempts], across every delivery of the message
// this Receive has seen: without a dead-letter policy the service reports
// no delivery attempt, so this is how a handler learns that it is on its
// 500th try. Only messages that have failed are remembered, until they
// succeed or, once attemptWindow messages are failing, until they are the
// oldest; a healthy message costs one lookup.
type attempts struct{ w *window[attempt] }

// attemptWindow is how many failing messages attempts remembers.
const attemptWindow = 10_000

type attempt struct {
	calls    int // handler calls so far
	failures int // failed calls that count against the limit
}

func newAttempts() attempts { return attempts{newWindow[attempt](attemptWindow)} }

// prior returns what is remembered of message id: zero if it never failed.
func (a attempts) prior(id string) attempt {
	v, _ := a.w.get(id)
	return v
}

// fail records that call number calls of message id failed, counted or not
// against the limit, and returns the failures so far that count.
func (a attempts) fail(id string, calls int, counted bool) int {
	return a.w.update(id, func(v attempt) attempt {
		v.calls = max(v.calls, calls)
		if counted {
			v.failures++
		}
		return v
	}).failures
}

// succeed forgets message id.
func (a attempts) succeed(id string) { a.w.delete(id) }

// Package window remembers a value for each of the last n message IDs: a
// bounded memory of recent messages, whatever their number.
package window

import (
	"crypto/sha256"
	"encoding/hex"
	"sync"
)

// A Window remembers a value for each of the last size message IDs put in
// it, forgetting the oldest once full. The zero value, or size 0,
// remembers nothing. It is safe for concurrent use.
//
// Each entry costs at most about 200 bytes, whatever the ID's length: an ID
// of up to [MaxRawID] bytes is kept as it is (about 100 bytes for the
// service's IDs), a longer one as its SHA-256 (see entry). Memory is bounded
// by the size, whatever the number, the keys or the length of the messages. A Receive keeps two: the IDs
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
	id = entry(id)
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
	id = entry(id)
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
	id = entry(id)
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

// MaxRawID is the longest ID a Window keeps as it is. The service's message
// IDs are decimal 64-bit numbers, 20 bytes at most, and the control log's
// event IDs are its messages'.
const MaxRawID = 64

// entry returns what the window keeps for id: id itself, up to MaxRawID
// bytes; otherwise a marker byte and the hex SHA-256 of id, MaxRawID+1
// bytes in all. No ID kept as it is has that length, so a short ID never
// stands for a long one, and two long IDs share an entry only if SHA-256
// collides: an ID is never taken for another (S6), and the bytes an entry
// holds are bounded whatever it is given.
func entry(id string) string {
	if len(id) <= MaxRawID {
		return id
	}
	sum := sha256.Sum256([]byte(id))
	var b [MaxRawID + 1]byte
	b[0] = '#'
	hex.Encode(b[1:], sum[:])
	return string(b[:])
}

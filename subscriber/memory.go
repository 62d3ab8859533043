package subscriber

import (
	"sync"
	"time"
)

// holds are the keys waiting for a failed message to come back (S5).
//
// A key is held from the nack of its failed message until that message is
// delivered again or the hold expires. Only keys that are held take room,
// and an expired hold is removed when its key is next seen or by the sweep
// that runs as the map doubles, so idle keys leave nothing behind.
type holds struct {
	mu      sync.Mutex
	m       map[string]hold // guarded by mu
	sweepAt int             // len(m) at which hold sweeps expired entries; guarded by mu
}

type hold struct {
	id    string    // the failed message, whose redelivery releases the key
	until time.Time // when the hold lapses anyway
}

// add holds key until message id comes back, or until until.
func (h *holds) add(key, id string, until time.Time, now time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.m == nil {
		h.m = make(map[string]hold)
	}
	h.m[key] = hold{id: id, until: until}
	if len(h.m) >= h.sweepAt {
		for k, v := range h.m {
			if now.After(v.until) {
				delete(h.m, k)
			}
		}
		h.sweepAt = max(64, 2*len(h.m))
	}
}

// admit reports whether a delivery of message id of key may run. The
// failed message itself releases its key; so does time.
func (h *holds) admit(key, id string, now time.Time) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	v, ok := h.m[key]
	if !ok {
		return true
	}
	if v.id == id || now.After(v.until) {
		delete(h.m, key)
		return true
	}
	return false
}

// len returns the number of held keys.
func (h *holds) len() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.m)
}

// processed remembers the IDs of the last n messages processed (S6), in a
// ring with a set beside it. The zero value, or n = 0, remembers nothing.
type processed struct {
	size int // the window; 0 remembers nothing. Set once.
	mu   sync.Mutex
	ids  map[string]struct{} // guarded by mu
	ring []string            // guarded by mu; the oldest ID is at next once full
	next int                 // guarded by mu
}

func newProcessed(n int) *processed {
	if n == 0 {
		return &processed{}
	}
	return &processed{size: n, ids: make(map[string]struct{}, n), ring: make([]string, 0, n)}
}

// add records id as processed, forgetting the oldest ID once full.
func (p *processed) add(id string) {
	if p.size == 0 {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if _, ok := p.ids[id]; ok {
		return
	}
	if len(p.ring) < p.size {
		p.ring = append(p.ring, id)
	} else {
		delete(p.ids, p.ring[p.next])
		p.ring[p.next] = id
		p.next = (p.next + 1) % len(p.ring)
	}
	p.ids[id] = struct{}{}
}

// contains reports whether id is remembered as processed.
func (p *processed) contains(id string) bool {
	if p.size == 0 {
		return false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	_, ok := p.ids[id]
	return ok
}

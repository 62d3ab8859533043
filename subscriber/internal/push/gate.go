package push

import (
	"context"
	"sync"
)

// keyGate runs the pushes of one key one at a time. The service keeps one
// message of a key outstanding, but a push whose answer came too late is
// pushed again while its first call may still run; the second waits for
// the first, then finds it processed (S6) or runs it again after it.
type keyGate struct {
	mu   sync.Mutex
	busy map[string]chan struct{} // closed when the key's push ends
}

// enter waits until no other push of key runs, and returns the function
// that ends this one; or ctx.Err().
func (g *keyGate) enter(ctx context.Context, key string) (func(), error) {
	for {
		g.mu.Lock()
		ch, taken := g.busy[key]
		if !taken {
			if g.busy == nil {
				g.busy = map[string]chan struct{}{}
			}
			ch = make(chan struct{})
			g.busy[key] = ch
			g.mu.Unlock()
			return func() {
				g.mu.Lock()
				delete(g.busy, key)
				g.mu.Unlock()
				close(ch)
			}, nil
		}
		g.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

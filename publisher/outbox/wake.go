package outbox

import (
	"context"
	"sync"
	"sync/atomic"
)

// wakers are the relays of one [Outbox] running in this process, which
// [Outbox.Add] wakes: the relay then reads soon after the caller's commit,
// rather than at its next poll.
type wakers struct {
	n   atomic.Int32 // len(chs), read without the lock
	mu  sync.Mutex
	chs map[chan struct{}]bool
}

// add returns a channel that wake signals, and what removes it.
func (w *wakers) add() (<-chan struct{}, func()) {
	ch := make(chan struct{}, 1)
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.chs == nil {
		w.chs = map[chan struct{}]bool{}
	}
	w.chs[ch] = true
	w.n.Add(1)
	return ch, func() {
		w.mu.Lock()
		defer w.mu.Unlock()
		delete(w.chs, ch)
		w.n.Add(-1)
	}
}

// wake signals every relay added, without blocking.
func (w *wakers) wake() {
	if w.n.Load() == 0 {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	for ch := range w.chs {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
}

// A Listener tells a [Relay] when events may have been committed, from
// any process: it starts listening on channel, and returns a channel on
// which it sends (without blocking, dropping a send that would block)
// whenever a notification comes, and which it closes once ctx has ended
// or it can no longer listen. On PostgreSQL, every transaction that adds
// events notifies the channel [Outbox.Channel] at its commit (a trigger
// on the events table does), and a Listener LISTENs there on a connection
// of its own: database/sql has no way to, so a Listener uses the driver,
// as dbtest/pgtest.Listener and examples/outbox do with pgx.
//
// A relay runs it when Run starts, and again at a lease round after the
// channel closed; between, and always, it polls ([WithPollInterval]).
type Listener func(ctx context.Context, channel string) (<-chan struct{}, error)

// Channel returns the name of the PostgreSQL notification channel that
// the outbox's commits notify, for a [Listener].
func (o *Outbox) Channel() string { return o.t.channel }

// Package barrier keeps a delivery from running before its Receive has
// seen every park of its key that another process recorded before the
// service sent it, at the cost of a marker's round trip for each park
// rather than for each key new to the process (parking's barrier in
// DESIGN.md).
//
// The service moves a key between the processes of a subscription only
// when none has a message of it outstanding. A process that parks a key
// records the park, learns of it from the log, and then waits D (the
// parking wait) before it acks what it parked: the key's next message can
// reach another process only once the park is D old, by the parker's
// clock. That process's view of the log may lag, though, and show the key
// free. Its view holds every event published before a marker of its own
// that has come back: the log is in one order. So a delivery that arrives
// at a lane holding nothing of its key runs at once if a marker this
// Receive sent within the last D, by its own clock, has come back: that
// marker was published after the park was stored, so the view has the
// park. Otherwise it waits for a marker sent after it arrived.
//
// To keep that window open without a wait, a Receive that is receiving
// keys new to it sends itself a marker every D/4 and does not wait for it;
// a Receive that sees no new key for D sends nothing. Markers are shared:
// deliveries that arrive while one is on its way wait for the next, so a
// busy Receive sends one marker per round trip at most.
//
// The argument uses durations on each process's clock, never wall times
// compared across processes: it holds as long as the clocks of two
// processes run at the same rate within a small fraction of D, which
// monotonic clocks do. A parker that dies during its wait leaves what it
// parked leased for at least 5 s more (the official client renews a lease
// when 5 s of it are left), which is why D is at most 5 s. If the control
// topic's round trip is longer than about 3D/4, markers come back too
// late to keep the window open, and new keys wait for one each time:
// slower, never unsafe.
//
// The package knows nothing of lanes or of the control log: a waiter is a
// function called once its fence has passed, and the caller sends each
// marker (Round).
package barrier

import (
	"sync"
	"sync/atomic"
	"time"
)

// A Barrier is safe for concurrent use. Make one with New.
type Barrier struct {
	// started counts the markers begun; a delivery arriving now needs the
	// next. passed is the newest marker seen back. Both grow only.
	started atomic.Uint64
	passed  atomic.Uint64

	// base is when the barrier was made; freshSent is when the newest
	// marker seen back was sent, lastStart when the last one was begun,
	// and lastNew when a key new to a lane last arrived, all as durations
	// since base (0 for never). window is D. base and window are set once.
	base      time.Time
	window    time.Duration
	freshSent atomic.Int64
	lastStart atomic.Int64
	lastNew   atomic.Int64

	// waiters and calls wait for their fence. Guarded by mu, which may be
	// taken with a caller's lock held (a lane's shard mutex), never the
	// other way round.
	mu      sync.Mutex
	waiters []waiter
	calls   []call
	// kick wakes the loop that sends markers.
	kick chan struct{}
}

type waiter struct {
	fence uint64
	wake  func()
}

type call struct {
	fence uint64
	done  chan struct{}
}

// New returns a barrier whose window, D, is window.
func New(window time.Duration) *Barrier {
	return &Barrier{base: time.Now(), window: window, kick: make(chan struct{}, 1)}
}

// Window returns D.
func (b *Barrier) Window() time.Duration { return b.window }

// Kick returns the channel that gets a signal when a marker may be
// wanted: the loop that sends markers then runs a Round.
func (b *Barrier) Kick() <-chan struct{} { return b.kick }

// since returns now as a duration since b.base, never 0.
func (b *Barrier) since(now time.Time) int64 { return max(int64(now.Sub(b.base)), 1) }

// Arrived records that a delivery of a key new to its lane arrived at now,
// and returns the marker it must wait for: 0 if the view is fresh, that is
// if a marker sent within the window has come back, or else the first
// marker begun after this call. Either way it keeps markers coming while
// new keys do.
func (b *Barrier) Arrived(now time.Time) uint64 {
	t := b.since(now)
	if b.lastNew.Swap(t) < t-int64(b.window)/4 {
		b.wake() // new keys after a pause: the loop may have to begin sending markers
	}
	if sent := b.freshSent.Load(); sent != 0 && t-sent <= int64(b.window) {
		return 0
	}
	return b.Want()
}

// Want returns the marker a caller arriving now must wait for: the first
// one begun after this call.
func (b *Barrier) Want() uint64 { return b.started.Load() + 1 }

// Wait registers wake to be called once marker fence has come back, and
// reports false, registering nothing, if it has already. wake is called
// by the goroutine that runs Round, with no lock of the barrier's held.
func (b *Barrier) Wait(fence uint64, wake func()) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.passed.Load() >= fence {
		return false
	}
	b.waiters = append(b.waiters, waiter{fence, wake})
	b.wakeLocked()
	return true
}

// Await returns a channel closed once marker fence has come back.
func (b *Barrier) Await(fence uint64) <-chan struct{} {
	c := call{fence: fence, done: make(chan struct{})}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.passed.Load() >= fence {
		close(c.done)
		return c.done
	}
	b.calls = append(b.calls, c)
	b.wakeLocked()
	return c.done
}

func (b *Barrier) wake() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.wakeLocked()
}

// wakeLocked tells the loop a marker may be wanted. b.mu must be held.
func (b *Barrier) wakeLocked() {
	select {
	case b.kick <- struct{}{}:
	default:
	}
}

// refreshDue reports whether the loop should begin a marker now to keep
// the window open: new keys arrived within the window, and none was begun
// in the last quarter of it.
func (b *Barrier) refreshDue(now time.Time) bool {
	t := b.since(now)
	return t-b.lastNew.Load() <= int64(b.window) && t-b.lastStart.Load() >= int64(b.window)/4
}

// wanted reports whether a waiter or a call waits for a marker not yet
// begun.
func (b *Barrier) wanted() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	started := b.started.Load()
	for _, w := range b.waiters {
		if w.fence > started {
			return true
		}
	}
	for _, c := range b.calls {
		if c.fence > started {
			return true
		}
	}
	return false
}

// pass records that marker n came back, and returns the waiters it frees;
// the calls it frees are told at once.
func (b *Barrier) pass(n uint64) []func() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.passed.Store(n)
	var free []func()
	waiting := b.waiters[:0]
	for _, w := range b.waiters {
		if w.fence <= n {
			free = append(free, w.wake)
		} else {
			waiting = append(waiting, w)
		}
	}
	clear(b.waiters[len(waiting):])
	b.waiters = waiting
	calls := b.calls[:0]
	for _, c := range b.calls {
		if c.fence <= n {
			close(c.done)
		} else {
			calls = append(calls, c)
		}
	}
	clear(b.calls[len(calls):])
	b.calls = calls
	return free
}

// Round sends markers, one at a time, while something waits for one not
// yet begun or a refresh is due, and calls the waiters each frees. send
// publishes one marker and returns once it has come back, or false if the
// round must stop (the loop is stopping). One goroutine runs Round.
func (b *Barrier) Round(send func() bool) {
	for b.wanted() || b.refreshDue(time.Now()) {
		n := b.started.Add(1)
		sent := b.since(time.Now()) // before the marker is published
		b.lastStart.Store(sent)
		if !send() {
			return
		}
		if b.freshSent.Load() < sent {
			b.freshSent.Store(sent) // only Round stores it
		}
		for _, wake := range b.pass(n) {
			wake()
		}
	}
}

// NextRefresh returns how long the loop may sleep before a refresh could
// be due, or false if new keys have stopped coming.
func (b *Barrier) NextRefresh(now time.Time) (time.Duration, bool) {
	t := b.since(now)
	if t-b.lastNew.Load() > int64(b.window) {
		return 0, false
	}
	return max(time.Duration(b.lastStart.Load()+int64(b.window)/4-t), time.Millisecond), true
}

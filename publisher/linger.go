package publisher

import (
	"sync"
	"sync/atomic"
	"time"
)

// A key with nothing in flight lingers before its first request, so that
// the messages published right after its first go with it: a burst's key
// then costs one request, not one for its first message and one for the
// rest. The linger adapts: the lingers are looked at every lingerTick,
// and a key is sent at the first look that finds no Publish call of the
// publisher since the last, or once it has lingered for lingerMax (or
// DelayThreshold, if shorter). A lone message waits one to two ticks;
// under a burst, whose keys take turns (each of 200 keys round-robin gets
// a message every 200 calls, which may be longer than a tick), a key
// waits until the burst is over, up to the cap.
const (
	lingerTick = time.Millisecond
	lingerMax  = 5 * time.Millisecond
)

// lingerState is a queue's linger; guarded by its shard's mutex.
type lingerState struct {
	since time.Duration // when it began, by recorder.now
	gen   uint32        // counts the lingers of the queue, to tell a stale entry
}

// start begins a linger at now.
func (l *lingerState) start(now time.Duration) {
	l.since = now
	l.gen++
}

// lingers are the queues lingering, looked at by one timer: no goroutine
// per key. Lock order: mu, then a shard's mutex, then the run queue's.
type lingers struct {
	p  *Publisher
	mu sync.Mutex
	// list holds the queues added since they began to linger, with the
	// linger they were added for: an entry whose queue has since been
	// sent, or lingers again, is stale and dropped. Guarded by mu.
	list  []lingerEntry
	timer *time.Timer // armed while list is not empty; guarded by mu
	armed bool        // guarded by mu
	// closed is set by Close: every linger ends, and none begins.
	closed bool // guarded by mu
	// calls counts the publisher's Publish calls that queued a message
	// (enqueue adds), and seen is its value at the last tick; guarded by
	// mu.
	calls atomic.Uint64
	seen  uint64
}

type lingerEntry struct {
	q   *keyQueue
	gen uint32
}

// add adds q, which has just begun its linger gen, to the lingers.
func (l *lingers) add(q *keyQueue, gen uint32) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		// Close ended the lingers after this one began.
		l.end(lingerEntry{q, gen})
		return
	}
	l.list = append(l.list, lingerEntry{q, gen})
	if !l.armed {
		l.armed = true
		if l.timer == nil {
			l.timer = time.AfterFunc(l.p.lingerTick, l.tick)
		} else {
			l.timer.Reset(l.p.lingerTick)
		}
	}
}

// tick looks at every linger: it sends a queue that got no new message
// since the last look, or has lingered for long enough, and keeps the
// others.
func (l *lingers) tick() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return
	}
	now := l.p.rec.now()
	calls := l.calls.Load()
	busy := calls != l.seen
	l.seen = calls
	kept := l.list[:0]
	for _, e := range l.list {
		if l.look(e, now, busy) {
			kept = append(kept, e)
		}
	}
	clear(l.list[len(kept):])
	l.list = kept
	if len(kept) == 0 {
		l.armed = false
		if cap(l.list) > 1024 {
			l.list = nil // P7: give back what a burst made it grow to
		}
		return
	}
	l.timer.Reset(l.p.lingerTick)
}

// look is tick's look at e at now, busy if the publisher was given
// messages since the last tick: it reports whether e lingers on.
func (l *lingers) look(e lingerEntry, now time.Duration, busy bool) bool {
	q := e.q
	q.sh.mu.Lock()
	defer q.sh.mu.Unlock()
	if q.state != lingering || q.linger.gen != e.gen {
		return false
	}
	if busy && now-q.linger.since < l.p.lingerFor {
		return true
	}
	l.p.makeReady(q)
	return false
}

// end sends e's queue now if it still lingers for e. l.mu is held.
func (l *lingers) end(e lingerEntry) {
	q := e.q
	q.sh.mu.Lock()
	defer q.sh.mu.Unlock()
	if q.state == lingering && q.linger.gen == e.gen {
		l.p.makeReady(q)
	}
}

// endAll sends every lingering queue now, for Flush; with close set, for
// Close, it also stops the timer and ends every later linger at once.
func (l *lingers) endAll(close bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, e := range l.list {
		l.end(e)
	}
	clear(l.list)
	l.list = l.list[:0]
	if close {
		l.closed = true
		if l.timer != nil {
			l.timer.Stop()
		}
		l.armed = false
	}
}

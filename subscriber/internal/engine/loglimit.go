package engine

import (
	"sync"
	"time"
)

// A logLimit spaces the log lines of one kind per (key, producer): one per
// every, each telling how many it held back since the last. Whoever may
// publish to the topic controls keys and producer IDs, so its memory is
// bounded, at maxPairs pairs of at most about 1.2 KB each (a key of 1024
// bytes, a producer ID of 128), and so is its output: at most burst lines
// a minute in all, whatever the pairs. A pair forgotten at the bound may
// log again early, within that budget.
type logLimit struct {
	every time.Duration

	mu sync.Mutex // guards what follows
	m  map[limitPair]*limitEntry
	// minute is when the current minute of the budget began, and spent
	// the lines logged in it.
	minute time.Time
	spent  int
}

type limitPair struct{ key, producer string }

type limitEntry struct {
	last       time.Time // when the pair last logged
	suppressed int64     // lines held back since
}

const (
	maxLimitPairs = 1024
	limitBurst    = 100 // lines a minute, all pairs together
)

func newLogLimit(every time.Duration) *logLimit {
	return &logLimit{every: every, m: make(map[limitPair]*limitEntry)}
}

// allow reports whether a line for (key, producer) may be logged now, and
// how many of its lines were held back since its last one.
func (l *logLimit) allow(key, producer string) (bool, int64) {
	now := time.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	p := limitPair{key, producer}
	e := l.m[p]
	if e != nil && now.Sub(e.last) < l.every {
		e.suppressed++
		return false, 0
	}
	if now.Sub(l.minute) >= time.Minute {
		l.minute, l.spent = now, 0
	}
	if l.spent >= limitBurst {
		if e != nil {
			e.suppressed++
		}
		return false, 0
	}
	l.spent++
	if e == nil {
		l.makeRoom(now)
		e = &limitEntry{}
		l.m[p] = e
	}
	since := e.suppressed
	e.last, e.suppressed = now, 0
	return true, since
}

// makeRoom keeps the map within maxLimitPairs: it drops the pairs whose
// wait is over, and if that is not enough, all of them. l.mu is held.
func (l *logLimit) makeRoom(now time.Time) {
	if len(l.m) < maxLimitPairs {
		return
	}
	for p, e := range l.m {
		if now.Sub(e.last) >= l.every {
			delete(l.m, p)
		}
	}
	if len(l.m) >= maxLimitPairs {
		clear(l.m)
	}
}

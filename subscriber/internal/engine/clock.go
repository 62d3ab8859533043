package engine

import (
	"sync"
	"time"
)

// clock starts the timers of a Receive and waits for their functions.
type clock struct{ wg sync.WaitGroup }

// after calls f in its own goroutine after d, as time.AfterFunc does, and
// counts it until it returns or is stopped.
func (c *clock) after(d time.Duration, f func()) *time.Timer {
	c.wg.Add(1)
	return time.AfterFunc(d, func() {
		defer c.wg.Done()
		f()
	})
}

// stop stops t, and reports whether f will not run.
func (c *clock) stop(t *time.Timer) bool {
	if t != nil && t.Stop() {
		c.wg.Done()
		return true
	}
	return false
}

// Package backoff computes the waits of a doubling backoff, the one the
// subscriber's retries and its own publishes (Publish) share.
package backoff

import "time"

// Doubling returns the wait after the n-th failure in a row: first after
// the first, doubling with each one after it, and at most most.
func Doubling(first, most time.Duration, n int) time.Duration {
	d := first
	for i := 1; i < n && d < most; i++ {
		d *= 2
	}
	return min(d, most)
}

// Publish is the wait after the n-th failure in a row of a publish of
// keyorder's own, an event of parking's control log or a flight's copies
// to the parking topic: 100 ms, doubling up to 2 s. It is not
// WithBackoff's, which spaces a handler's calls and may be minutes: what
// waits for such a publish, a release, the barrier or a key held by its
// flight, must not wait that long.
func Publish(n int) time.Duration { return Doubling(100*time.Millisecond, 2*time.Second, n) }

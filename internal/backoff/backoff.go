// Package backoff computes the waits of a doubling backoff, the one the
// subscriber's retries and its control log's share.
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

// Package leaktest checks that a test package leaves no goroutines behind,
// ignoring the few that Pub/Sub's dependencies start once per process:
// those orderingtest.IgnoreGoroutines lists, for users as for keyorder.
package leaktest

import (
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/keyorder/keyorder/ordering/orderingtest"
)

// VerifyTestMain runs the package's tests and fails the run if any
// goroutine other than the process-wide ones is still running afterwards.
// Use it as the body of TestMain.
func VerifyTestMain(m *testing.M, opts ...goleak.Option) {
	goleak.VerifyTestMain(m, append(opts, orderingtest.IgnoreGoroutines()...)...)
}

// Verify fails t if goroutines other than the process-wide ones are
// running. Use it at the end of a test that must clean up after itself
// while other tests of its package may still run goroutines of their own:
// pass goleak.IgnoreCurrent() taken at the test's start.
func Verify(t testing.TB, opts ...goleak.Option) {
	t.Helper()
	goleak.VerifyNone(t, append(opts, orderingtest.IgnoreGoroutines()...)...)
}

// Await waits up to d for every goroutine but the process-wide ones and
// those opts ignore to exit, and fails t with those left if some are
// still running then. Use it where goroutines are promised to end on
// their own, later than the call that started them returns; pass
// goleak.IgnoreCurrent() taken before the calls, in a test that does not
// run in parallel with others.
func Await(t testing.TB, d time.Duration, opts ...goleak.Option) {
	t.Helper()
	opts = append(opts, orderingtest.IgnoreGoroutines()...)
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	end := time.After(d)
	for {
		err := goleak.Find(opts...)
		if err == nil {
			return
		}
		select {
		case <-tick.C:
		case <-end:
			t.Errorf("goroutines still running %v later: %v", d, err)
			return
		}
	}
}

package orderingtest

import "go.uber.org/goleak"

// IgnoreGoroutines returns the goleak options that ignore the goroutines
// the official client and its dependencies start and that outlive every
// call a test makes, so are not the test's to stop:
//   - opencensus's stats worker, started by an init function, for the life
//     of the process;
//   - the official client's stream keep-alive loop, which checks for
//     shutdown only between ticks of its ping timers, and so outlives the
//     Receive that started it by up to 10 s.
//
// A package whose tests use Pub/Sub checks for leaks with
//
//	func TestMain(m *testing.M) {
//		goleak.VerifyTestMain(m, orderingtest.IgnoreGoroutines()...)
//	}
//
// and a test that must clean up after itself while others run with
// goleak.VerifyNone(t, append(orderingtest.IgnoreGoroutines(),
// goleak.IgnoreCurrent())...), IgnoreCurrent taken at the test's start.
// keyorder's own tests use this list. It is new on each call, for the
// caller to append to.
func IgnoreGoroutines() []goleak.Option {
	return []goleak.Option{
		goleak.IgnoreTopFunction("go.opencensus.io/stats/view.(*worker).start"),
		goleak.IgnoreTopFunction("cloud.google.com/go/pubsub/v2.(*messageIterator).streamKeepAliveHandler"),
	}
}

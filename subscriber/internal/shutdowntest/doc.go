// Package shutdowntest tests that a subscriber's shutdown is bounded
// whatever the server does (ShutdownBound), and that the official
// client's goroutines a shutdown stopped waiting for end on their own.
// It is a package of its own because that last check waits for them, up
// to the official client's request timeout, with no other test running
// beside it; here it does not hold up the subscriber package's tests.
package shutdowntest

// Package engine is the delivery engine of package subscriber, carved out
// of it in steps: the state and the rules every door (a lane of the
// pull path, a push request, a release of a parked key) shares. It holds
// the one outcome type so far; keys, lanes and the call path move here
// next. It knows nothing of the doors.
package engine

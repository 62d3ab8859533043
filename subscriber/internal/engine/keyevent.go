package engine

import "time"

// A HeldKey is a key whose next message cannot run yet because a message
// of the key failed: it waits for the message's next attempt, or is held
// until the service brings the message back (S5).
type HeldKey struct {
	Key string
	// MessageID is the failed message: no later message of the key runs
	// before it has succeeded.
	MessageID string
	// Since is when the message first failed.
	Since time.Time
	// Attempt is the number of handler calls of the message so far,
	// across its deliveries (see [Delivery.Attempt]).
	Attempt int
	// Err is the last call's error.
	Err error
	// Held is true once the failure policy has applied: the message was
	// nacked with its key's local tail, and the key waits for the service
	// to bring it back. It is false while the message waits, here, for a
	// retry.
	Held bool
	// RetryAt is when the next call is due; zero while the message is
	// away (Held and not yet back).
	RetryAt time.Time
	// Queued counts the key's other deliveries waiting here: behind the
	// message, or, for an earlier number of its producer delivered late,
	// before it.
	Queued int
}

// KeyEventKind tells what happened to a key.
type KeyEventKind int

const (
	// KeyHeld: the failure policy applied to a message of the key, which
	// was nacked with its local tail; the key's later messages wait for it
	// (S5). A key that fails again while held is not reported again.
	KeyHeld KeyEventKind = iota + 1
	// KeyReleased: the hold ended, because the failed message succeeded,
	// the service gave up on it (dead-lettering), or the hold lapsed after
	// subscriber.WithRedeliveryWait. [KeyEvent.Reason] says which.
	KeyReleased
	// KeyParked: a message of the key failed for good and the key was
	// parked (subscriber.WithParking): it and the key's later messages go to the
	// parking topic until subscriber.Subscription.Release. Told by the process
	// that parked it.
	KeyParked
	// KeyUnparked: subscriber.Subscription.Release ran the key's parked messages
	// and unparked it. Told by the process that released it, with the
	// message that parked the key; Attempt is 0, as the control log does
	// not keep that message's calls.
	KeyUnparked
)

func (k KeyEventKind) String() string {
	switch k {
	case KeyHeld:
		return "held"
	case KeyReleased:
		return "released"
	case KeyParked:
		return "parked"
	case KeyUnparked:
		return "unparked"
	}
	return "unknown"
}

// Reasons a hold ends, in [KeyEvent.Reason].
const (
	ReasonSucceeded    = "succeeded"
	ReasonDeadLettered = "dead-lettered"
	ReasonLapsed       = "hold lapsed"
	ReasonReleased     = "released" // KeyUnparked: by Subscription.Release
)

// A KeyEvent is what a subscriber.WithKeyEvents callback is told.
type KeyEvent struct {
	Kind KeyEventKind
	// Key is the key, and HeldKey what was known of its failure when the
	// event happened.
	HeldKey
	// Reason says why a KeyReleased hold ended, and is ReasonReleased for
	// KeyUnparked; empty for KeyHeld and KeyParked.
	Reason string
	// At is when it happened.
	At time.Time
}

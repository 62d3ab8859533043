package inbox

import "errors"

// ErrInvalidConfig is returned, wrapped with the offending value, by [New]
// and [Inbox.Prune] when an argument or an [Option] is out of its
// documented range.
var ErrInvalidConfig = errors.New("keyorder/inbox: invalid configuration")

// ErrUnstamped is returned by a [Inbox.Handler] handler, wrapped in
// subscriber.Permanent with the message's ID, for a message without a key
// or without a valid stamp (Delivery.Seq is 0): nothing tells a copy of it
// from a new message, so the inbox cannot apply it exactly once. The
// failure policy of the subscription then applies (S5): the key is held,
// or parked with WithParking. [WithUnstampedAtLeastOnce] applies such
// messages instead, without a record.
var ErrUnstamped = errors.New("keyorder/inbox: message has no key or no stamp; it cannot be applied exactly once")

// ErrSeqRange is returned by a [Inbox.Handler] handler, wrapped in
// subscriber.Permanent with the message's ID, for a stamp whose number is
// 2^63 or more (an epoch of 2^31 or more), which does not fit the
// BIGINT column the inbox records it in. keyorder's publisher never
// stamps one.
var ErrSeqRange = errors.New("keyorder/inbox: sequence number does not fit a BIGINT")

// ErrClosed is returned by a [Inbox.Handler] handler once [Inbox.Close]
// was called: the message is not applied, and the subscription retries it
// as it would any handler's error, on this replica or another.
var ErrClosed = errors.New("keyorder/inbox: closed")

// ErrGapWait is the error a [Inbox.Handler] handler returns, wrapped in
// subscriber.RetryAfter with the gap, while a message after a gap in its
// producer's numbers waits for the missing ones (see [WithGapWait]). A
// RetryAfter costs the message no attempt; the subscription's
// WithErrorHandler sees it with every other failed call.
var ErrGapWait = errors.New("keyorder/inbox: waiting for missing sequence numbers")

// ErrTableShape is returned by [New] when a table of the inbox's name
// exists and is not the inbox's: a column the inbox writes is missing, or
// one it does not write is required. Nothing is written to it; name
// another table with [WithTable].
var ErrTableShape = errors.New("keyorder/inbox: table is not the inbox's")

// ErrUnstorable is returned by a [Inbox.Handler] handler, wrapped in
// subscriber.Permanent with the message's ID, for a message whose key or
// producer the table cannot hold: a NUL byte, or bytes that are not
// UTF-8. A retry would fail alike, so the failure policy of the
// subscription applies (S5) at once.
var ErrUnstorable = errors.New("keyorder/inbox: key or producer cannot be stored")

// ErrTxEnded is returned by a [Inbox.Handler] handler, wrapped in
// subscriber.Permanent with the message's ID, when the [ApplyFunc]
// committed or rolled back the inbox's transaction, which it must leave
// to the inbox: what was committed is then not what the inbox decided.
// It is a bug in apply that no retry mends, so the failure policy of the
// subscription applies (S5).
var ErrTxEnded = errors.New("keyorder/inbox: apply committed or rolled back the inbox's transaction; an ApplyFunc must leave it to the inbox")

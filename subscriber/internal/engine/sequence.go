package engine

import (
	"strings"

	"github.com/keyorder/keyorder/ordering"
)

// Sequence checks use the stamp a producer puts on each keyed message
// ([ordering.Stamp]): its ID, and the message's number in its sequence for
// the key, which counts from 1 and never reuses a number. The window that
// remembers them is a package of its own, internal/seqwindow; this file
// holds the Receive's types and helpers, and call.go the checks
// (checkSequence).
//
// The service delivers a key's messages in publish order (on an ordered
// subscription), and a lane runs them one at a time in that order, so for
// each (key, producer) it is nearly enough to remember the highest number
// processed. Checked by the call path (call.go), just before the handler
// call:
//
//   - A number at or below it is a copy of a message processed already:
//     the service stored one publish twice, under two message IDs, when the
//     official client retried a request whose response was lost. It is
//     acked without calling the handler, on top of S6's ID window, which
//     cannot see it.
//   - A number more than one above it is a gap: the numbers between were
//     never processed here. They failed to publish (republished or not,
//     they were not stored under those numbers), were dead-lettered, or
//     went to another client of the subscription. The gap is reported to
//     [WithGapHandler], and the message is then processed as usual.
//   - A number reported missing is owed: it is no copy when it comes, late
//     or redriven from a dead-letter topic, and runs once. So is a number
//     processed whose ack failed on an exactly-once subscription (the
//     service will deliver it again); the failed ack of a copy, skipped
//     unrun, makes nothing owed.
//
// The first stamp of a (key, producer) seen in a Receive is where the
// sequence starts here, not where the producer started it: a first number
// above 1 of its epoch follows numbers never seen here, counted as an
// uncertain gap (Stats.UncertainGaps, logged at Debug, not told to
// WithGapHandler, which hears of the numbers missing between two this
// Receive saw). A number below it is taken for a copy only where the
// service's order proves it one: it resends a key's tail in order, so a
// lower number that comes later was stored later. A redriven one
// ([DeadLetterSourceAttribute]) runs, once; on a server that redelivers out
// of order ([WithUnorderedRedelivery]) every one runs, and only what this
// Receive recorded run is a copy. The same holds below the latest epoch
// begun here, whose predecessor's end was never seen.
//
// A gap is certain only when the key's earlier message was still here
// when the one after the gap arrived: the service moves a key between
// clients only when none of its messages is outstanding, so a key that had
// nothing here, however briefly, may have been on another client, and its
// numbers processed there. Such a gap, and any on a server that
// redelivers out of order, where the numbers may still come, is uncertain.
//
// A producer that counts a key afresh starts a new epoch of its numbers
// (see [ordering.Stamp], Epochs), whose numbers are all above the old
// epoch's. A number of a higher epoch than the last one seen starts a new
// run: its first number is 1, and a higher one is a gap from 1; the jump
// from the old epoch is not a gap, since only the producer knew where the
// old epoch stopped. A number of a lower epoch is below the highest
// processed, hence a copy.
//
// The state is bounded, and every bound forgets towards running: the
// [WithSequenceWindow] most recently active (key, producer) pairs are
// remembered, and each keeps at most 64 runs of owed numbers and 64 runs
// of redriven ones. What a bound forgets may run a second time, which is
// counted in [Stats.Rerun] and logged; it is never taken for a copy and
// acked unrun. Messages without a key, without a stamp, or on an
// unordered subscription, where the service promises no order, are not
// checked.

// DeadLetterSourceAttribute is the attribute the service adds to a message
// it forwards to a dead-letter topic, naming the subscription it came
// from. A stamped message that carries it was redriven: republished from
// the dead-letter topic with its attributes. Its number, if it is older
// than what this Receive has seen of its key, runs rather than being taken
// for a copy (S12).
const DeadLetterSourceAttribute = "CloudPubSubDeadLetterSourceSubscription"

// redrivenHeader is DeadLetterSourceAttribute as an unwrapped push
// request's header carries it.
var redrivenHeader = strings.ToLower(DeadLetterSourceAttribute)

// startsLate reports whether seq is above the first number of its epoch.
func startsLate(seq uint64) bool {
	_, n := ordering.SplitSeq(seq)
	return n > 1
}

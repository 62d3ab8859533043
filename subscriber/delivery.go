package subscriber

import (
	"time"

	"github.com/keyorder/keyorder/subscriber/internal/engine"
)

// A Handler processes one delivery. Returning nil acks the message (S4);
// returning an error, or panicking, retries it in place and finally nacks
// it together with its key's local tail (S5).
//
// ctx carries the values of Receive's context but is not cancelled when
// that context ends: a running handler may finish its work during
// shutdown, until the drain timeout cancels ctx (S7).
type Handler = engine.Handler

// A Delivery is one message handed to a [Handler]: its ID, Key, Data,
// Headers (its attributes, plus [ordering.Header] set to Key when it has
// one, S2), PublishTime, Attempt (the handler calls for the message in
// this Receive, across its deliveries: 1 for the first; calls that failed
// with [RetryAfter] count here but not against [WithMaxAttempts]; a
// release from parking starts the count afresh), DeliveryAttempt (the
// service's count, with a dead-letter policy), and Producer and Seq, its
// stamp ([ordering.Stamp]), zero when it has no valid one (or, with
// [WithStampKey], none whose signature verifies). The handler must not
// keep it after returning.
type Delivery = engine.Delivery

// A Gap is a run of a producer's sequence numbers for a key that Receive
// has not processed, found when a later number of the same key and
// producer came up for processing. [WithGapHandler] is told of each.
type Gap = engine.Gap

// DeadLetterSourceAttribute is the attribute the service adds to a message
// it forwards to a dead-letter topic, naming the subscription it came
// from. A stamped message that carries it was redriven: republished from
// the dead-letter topic with its attributes. Its number, if it is older
// than what this Receive has seen of its key, runs rather than being taken
// for a copy (S12).
const DeadLetterSourceAttribute = engine.DeadLetterSourceAttribute

// gapQuiet was how long a key had to be quiet here for a gap before its
// next message to be uncertain; any absence now makes it so, since a key
// may move to another client and back within a second. Only a test sets
// it (SetGapQuiet); nothing reads it.
var gapQuiet = time.Second

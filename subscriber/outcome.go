package subscriber

// An outcome is what became of one delivery: what the call path decided
// of a call (call.go), and how a door settled the delivery. It is the one
// name of each outcome in the call path, the doors, Stats and the
// metrics: its String is its keyorder.outcome label, reason its
// keyorder.reason label (observe.go).
//
// Adding an outcome is a constant and its labels here, the call path's
// decision of it (call.go), and what each door's settle does with it
// (lane.go, push.go, park_release.go).
type outcome uint8

const (
	outQueued outcome = iota // not settled: queued on its lane
	outJoined                // not settled: joined a job of the same message

	// What the call path decides of a call; a door settles it.

	outAcked        // the handler returned nil: ack (S4)
	outDeduplicated // not called, processed already (S6, S12): ack
	outShutdown     // not called, or failed, while Receive stops (S7): nack
	outRetried      // failed: call again after a delay (S5); push nacks, for the service to push again
	outHoldKey      // failed for good: nack, and hold the key until the message comes back (S5)
	outParked       // failed for good: park the key (WithParking); its deliveries move to the parking topic, acked
	outFailed       // failed for good, nothing to hold (S8) or dead-lettered: nack

	// How a door settles a delivery it does not call.

	outHeld         // nacked unrun: its key is held (S5)
	outTail         // nacked unrun with its key's failed message (S5)
	outRoom         // nacked unrun: its key had no room (S10)
	outSkipped      // acked unrun: outside the range a Replay reads
	outDeadLettered // outFailed on its last delivery: the service forwards it to the dead-letter topic

	numOutcomes // the number of outcomes, for tables indexed by outcome
)

// outcomeLabels are each outcome's metric labels, and whether its
// delivery is acked.
var outcomeLabels = [numOutcomes]struct {
	label, reason string
	acks          bool
}{
	outQueued:       {label: "queued"},
	outJoined:       {label: "joined"},
	outAcked:        {label: "acked", acks: true},
	outDeduplicated: {label: "deduplicated", acks: true},
	outShutdown:     {label: "nacked", reason: "shutdown"},
	outRetried:      {label: "nacked", reason: "retry"},
	outHoldKey:      {label: "nacked", reason: "failed"},
	outParked:       {label: "parked", acks: true},
	outFailed:       {label: "nacked", reason: "failed"},
	outHeld:         {label: "held", reason: "hold"},
	outTail:         {label: "held", reason: "tail"},
	outRoom:         {label: "nacked", reason: "room"},
	outSkipped:      {label: "acked", reason: "replay_range", acks: true},
	outDeadLettered: {label: "dead_lettered", reason: "failed"},
}

// String is o's keyorder.outcome label.
func (o outcome) String() string { return outcomeLabels[o].label }

// reason is o's keyorder.reason label, empty where it has none.
func (o outcome) reason() string { return outcomeLabels[o].reason }

// acks reports whether a delivery settled with o is acked.
func (o outcome) acks() bool { return outcomeLabels[o].acks }

// forGood reports whether the message failed for good.
func (o outcome) forGood() bool {
	return o == outHoldKey || o == outParked || o == outFailed || o == outDeadLettered
}

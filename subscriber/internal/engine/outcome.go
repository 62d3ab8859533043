package engine

// An Outcome is what became of one delivery: what the call path decided
// of a call, and how a door settled the delivery. It is the one name of
// each outcome in the call path, the doors, Stats and the metrics: its
// String is its keyorder.outcome label, Reason its keyorder.reason label.
//
// Adding an outcome is a constant and its labels here, the call path's
// decision of it, and what each door's settle does with it.
type Outcome uint8

const (
	Queued Outcome = iota // not settled: queued on its lane
	Joined                // not settled: joined a job of the same message

	// What the call path decides of a call; a door settles it.

	Acked        // the handler returned nil: ack (S4)
	Deduplicated // not called, processed already (S6, S12): ack
	Shutdown     // not called, or failed, while Receive stops (S7): nack
	Retried      // failed: call again after a delay (S5); push nacks, for the service to push again
	HoldKey      // failed for good: nack, and hold the key until the message comes back (S5)
	Parked       // failed for good: park the key (WithParking); its deliveries move to the parking topic, acked
	Failed       // failed for good, nothing to hold (S8) or dead-lettered: nack

	// How a door settles a delivery it does not call.

	Held         // nacked unrun: its key is held (S5)
	Tail         // nacked unrun with its key's failed message (S5)
	Room         // nacked unrun: its key had no room (S10)
	Skipped      // acked unrun: outside the range a Replay reads
	DeadLettered // Failed on its last delivery: the service forwards it to the dead-letter topic

	NumOutcomes // the number of outcomes, for tables indexed by Outcome
)

// labels are each outcome's metric labels, and whether its delivery is
// acked.
var labels = [NumOutcomes]struct {
	label, reason string
	acks          bool
}{
	Queued:       {label: "queued"},
	Joined:       {label: "joined"},
	Acked:        {label: "acked", acks: true},
	Deduplicated: {label: "deduplicated", acks: true},
	Shutdown:     {label: "nacked", reason: "shutdown"},
	Retried:      {label: "nacked", reason: "retry"},
	HoldKey:      {label: "nacked", reason: "failed"},
	Parked:       {label: "parked", acks: true},
	Failed:       {label: "nacked", reason: "failed"},
	Held:         {label: "held", reason: "hold"},
	Tail:         {label: "held", reason: "tail"},
	Room:         {label: "nacked", reason: "room"},
	Skipped:      {label: "acked", reason: "replay_range", acks: true},
	DeadLettered: {label: "dead_lettered", reason: "failed"},
}

// String is o's keyorder.outcome label.
func (o Outcome) String() string { return labels[o].label }

// Reason is o's keyorder.reason label, empty where it has none.
func (o Outcome) Reason() string { return labels[o].reason }

// Acks reports whether a delivery settled with o is acked.
func (o Outcome) Acks() bool { return labels[o].acks }

// ForGood reports whether the message failed for good.
func (o Outcome) ForGood() bool {
	return o == HoldKey || o == Parked || o == Failed || o == DeadLettered
}

package engine

import (
	"sync/atomic"
	"time"
)

// Counters are the cumulative counts of Stats, over every Receive of a
// subscription. Every field is atomic.
type Counters struct {
	Settled                                            [NumOutcomes]atomic.Int64 // by outcome (receive.go)
	Received, Retried, Failed, DeadLettered, AckFailed atomic.Int64
	Duplicates, Gaps, UncertainGaps, Rerun             atomic.Int64 // sequence.go
	Unverified                                         atomic.Int64 // job.go: takeStamp
	Parked, Released                                   atomic.Int64 // internal/parking
}

// Snapshot is what a running Receive holds now, for Stats and the
// gauges (survey).
type Snapshot struct {
	// Queued and Running count the deliveries queued and running, and
	// Keys the keys with something here.
	Queued, Running, Keys int
	// Held lists the keys waiting on a failed message, oldest first.
	Held []HeldKey
	// OldestAge is how long the oldest delivery here has been here.
	OldestAge time.Duration
	// ActivePartitions counts the partitions with a delivery queued or
	// running; Partitions lists the busiest, and TopBacklog and TopAge
	// the top keys, when the survey is ranked.
	ActivePartitions int
	Partitions       []PartitionStats
	TopBacklog       []KeyStats
	TopAge           []KeyStats
}

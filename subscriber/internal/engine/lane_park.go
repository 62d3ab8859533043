package engine

import ()

// The lanes' side of parking: the hooks a lane calls (accept, divert,
// park) and the flights that move a lane's deliveries to the parking
// topic. See park.go for the whole.

// Parking is what the lanes, the call path and the receiver's
// shutdown see of parking (park.go); the door that started it (Receive,
// the push endpoint) holds the parking itself. The shard's mutex must be
// held for accept, divert and park.
type Parking interface {
	// Accept is called for a new keyed delivery on l, before the lane's
	// other rules: one that arrives at a lane holding nothing of its key
	// waits for the barrier.
	Accept(l *Lane)
	// Divert holds l's queued deliveries for the barrier, or sends them
	// on a flight to the parking topic, and reports whether it did.
	Divert(l *Lane) bool
	// Park parks l's key with j, which failed for good with err: j goes
	// back to the head of l, and l's next flight parks the key.
	Park(l *Lane, j *Job, err error)
	// ReleasedLately reports whether the message id ran in the release of
	// a park that has ended lately: it must not run again (S6).
	ReleasedLately(id string) bool
	// Shutdown stops parking's work in the lanes, when the receiver shuts
	// down.
	Shutdown()
}

// A lane's part in parking. Every field is guarded by the lane's shard
// mutex; all are zero when parking is off and the key healthy.
type laneParking struct {
	// fence is the barrier marker the lane's deliveries wait for before
	// they run or are parked; 0 once passed. Set when a delivery arrives
	// at a lane holding nothing of its key.
	Fence uint64
	// waiting is set while the lane is registered with the barrier.
	Waiting bool
	// flight is set while the lane's deliveries are on their way to the
	// parking topic; the lane is active meanwhile, so no turn runs.
	Flight bool
	// failed is the message of the key that failed for good here, until a
	// flight has parked the key.
	Failed *ParkCause
	// tries counts the flights that failed in a row, for their backoff.
	Tries int
}

// busy reports whether the lane waits for the barrier or a flight, which
// will move it on.
func (pk *laneParking) busy() bool { return pk.Waiting || pk.Flight }

// ParkCause is why a key parks: the message that failed for good.
type ParkCause struct {
	ID      string
	Err     string
	Attempt int
}

// CauseOf is the park cause of j, which failed for good with err.
func CauseOf(j *Job, err error) *ParkCause {
	return &ParkCause{ID: j.D.ID, Err: err.Error(), Attempt: j.D.Attempt}
}

package engine

import "time"

// The lanes' side of parking: what the lanes see of it (Parking), a
// lane's part in it (laneParking) and why a key parks (ParkCause). What a
// lane does when a delivery arrives (fenceArrival), when it would run its
// next turn (divert: wait for the barrier, or send a flight to the parking
// topic), when a message fails for good (park), and when a flight lands
// are the lane's methods, beside its other failure policies
// (lane_failure.go). Parking itself, the barrier, the control log's view
// and the move to the parking topic, is the door's (internal/parking: park.go),
// seen through Parking.

// Parking is what the lanes, the call path and the receiver's shutdown see
// of parking; the door that started it (Receive, the push endpoint) holds
// the parking itself. Fence, ParkID and Wait are called with the shard's
// mutex held.
type Parking interface {
	// Fence returns the barrier marker a delivery that arrived at now, at
	// a lane holding nothing of its key, must wait for: 0 if the view is
	// fresh.
	Fence(now time.Time) uint64
	// ParkID returns the park in force for key, "" if it is not parked.
	ParkID(key string) string
	// Wait registers wake to be called once marker fence has come back,
	// and reports false, registering nothing, if it has already.
	Wait(fence uint64, wake func()) bool
	// Fly moves jobs, deliveries of key, to the parking topic, on a
	// goroutine of its own: it parks the key first if park is "" (cause
	// says why). It calls land with whether they are parked, and so may
	// be acked, and the move's error, and only then tells of a park it
	// made. land is called with no lock held.
	Fly(key string, jobs []*Job, park string, cause *ParkCause, land func(parked bool, err error))
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
	fence uint64
	// waiting is set while the lane is registered with the barrier.
	waiting bool
	// flight is set while the lane's deliveries are on their way to the
	// parking topic; the lane is active meanwhile, so no turn runs.
	flight bool
	// failed is the message of the key that failed for good here, until a
	// flight has parked the key.
	failed *ParkCause
	// tries counts the flights that failed in a row, for their backoff.
	tries int
}

// busy reports whether the lane waits for the barrier or a flight, which
// will move it on.
func (pk *laneParking) busy() bool { return pk.waiting || pk.flight }

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

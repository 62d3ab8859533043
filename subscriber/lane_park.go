package subscriber

import (
	"context"
	"errors"
	"time"
	"unicode/utf8"

	"github.com/keyorder/keyorder/subscriber/internal/engine"
)

// The lanes' side of parking: the hooks a lane calls (accept, divert,
// park) and the flights that move a lane's deliveries to the parking
// topic. See park.go for the whole.

// parkingHooks is what the lanes, the call path and the receiver's
// shutdown see of parking (park.go); the door that started it (Receive,
// the push endpoint) holds the parking itself. The shard's mutex must be
// held for accept, divert and park.
type parkingHooks interface {
	// accept is called for a new keyed delivery on l, before the lane's
	// other rules: one that arrives at a lane holding nothing of its key
	// waits for the barrier.
	accept(l *lane)
	// divert holds l's queued deliveries for the barrier, or sends them
	// on a flight to the parking topic, and reports whether it did.
	divert(l *lane) bool
	// park parks l's key with j, which failed for good with err: j goes
	// back to the head of l, and l's next flight parks the key.
	park(l *lane, j *job, err error)
	// releasedLately reports whether the message id ran in the release of
	// a park that has ended lately: it must not run again (S6).
	releasedLately(id string) bool
	// shutdown stops parking's work in the lanes, when the receiver shuts
	// down.
	shutdown()
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
	failed *parkCause
	// tries counts the flights that failed in a row, for their backoff.
	tries int
}

// busy reports whether the lane waits for the barrier or a flight, which
// will move it on.
func (pk *laneParking) busy() bool { return pk.waiting || pk.flight }

// parkCause is why a key parks: the message that failed for good.
type parkCause struct {
	id      string
	err     string
	attempt int
}

// causeOf is the park cause of j, which failed for good with err.
func causeOf(j *job, err error) *parkCause {
	return &parkCause{id: j.d.ID, err: err.Error(), attempt: j.d.Attempt}
}

// A flight moves a lane's deliveries to the parking topic: the copies are
// published, in order, then recorded in the control log, and only then
// acked on the subscription. Until it lands the lane runs nothing, so the
// key's later deliveries wait behind it. If the key is not parked yet, the
// flight parks it first.
type flight struct {
	p     *parking
	l     *lane
	jobs  []*job
	park  string     // the park in force when it left; "" to park the key
	cause *parkCause // why the key parks, if it does
}

// fly runs the flight on its own goroutine.
func (fl *flight) fly() {
	p := fl.p
	defer p.flights.Done()
	parked, parkedIt, err := p.move(p.ops, fl.l.key, fl.jobs, fl.park, fl.cause)
	fl.land(parked, err)
	if parkedIt {
		// Told once the flight has landed, so that a callback cannot hold
		// it up.
		p.told(KeyParked, fl.l.key, fl.cause, time.Now(), "")
	}
}

// truncateUTF8 cuts s to at most n bytes on a character boundary.
func truncateUTF8(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// land ends the flight. Parked, its deliveries are acked. Otherwise they go
// back to the head of the lane, in order: refused by the log (the key was
// released meanwhile), they run or fly again as the view now says; after
// an error, the lane waits a backoff and flies again, holding the key
// here, so that nothing is lost or overtaken. At shutdown they are nacked.
func (fl *flight) land(parked bool, err error) {
	l, r := fl.l, fl.p.r
	l.update(func(now time.Time) (fx effects) {
		pk := &l.pk
		pk.flight = false
		switch {
		case parked:
			pk.failed, pk.tries = nil, 0
			r.parked(&fx, fl.jobs...)
		case r.stopped():
			for _, j := range fl.jobs {
				fx.add(j, engine.Shutdown)
			}
		default:
			for i := len(fl.jobs) - 1; i >= 0; i-- {
				l.putBack(fl.jobs[i])
			}
			if err != nil {
				pk.tries++
				l.wait(r.backoff(pk.tries), now)
			}
		}
		return fx
	})
	if err != nil && !errors.Is(err, context.Canceled) {
		r.obs.log.Warn("keyorder/subscriber: could not park messages; will try again", "key", l.key, "error", err)
	}
}

package subscriber

import (
	"context"
	"errors"
	"time"
	"unicode/utf8"

	"github.com/keyorder/keyorder/subscriber/internal/engine"
)

// A flight moves a lane's deliveries to the parking topic: the copies are
// published, in order, then recorded in the control log, and only then
// acked on the subscription. Until it lands the lane runs nothing, so the
// key's later deliveries wait behind it. If the key is not parked yet, the
// flight parks it first.
type flight struct {
	p     *parking
	l     *engine.Lane
	jobs  []*engine.Job
	park  string            // the park in force when it left; "" to park the key
	cause *engine.ParkCause // why the key parks, if it does
}

// fly runs the flight on its own goroutine.
func (fl *flight) fly() {
	p := fl.p
	defer p.flights.Done()
	parked, parkedIt, err := p.move(p.ops, fl.l.Key, fl.jobs, fl.park, fl.cause)
	fl.land(parked, err)
	if parkedIt {
		// Told once the flight has landed, so that a callback cannot hold
		// it up.
		p.Told(KeyParked, fl.l.Key, fl.cause, time.Now(), "")
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
	l.Update(func(now time.Time) (fx engine.Effects) {
		pk := &l.Pk
		pk.Flight = false
		switch {
		case parked:
			pk.Failed, pk.Tries = nil, 0
			r.Parked(&fx, fl.jobs...)
		case r.Stopped():
			for _, j := range fl.jobs {
				fx.Add(j, engine.Shutdown)
			}
		default:
			for i := len(fl.jobs) - 1; i >= 0; i-- {
				l.PutBack(fl.jobs[i])
			}
			if err != nil {
				pk.Tries++
				l.Wait(r.Backoff(pk.Tries), now)
			}
		}
		return fx
	})
	if err != nil && !errors.Is(err, context.Canceled) {
		r.Obs.Log.Warn("keyorder/subscriber: could not park messages; will try again", "key", l.Key, "error", err)
	}
}

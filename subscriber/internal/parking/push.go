package parking

import (
	"context"
	"time"

	"github.com/keyorder/keyorder/subscriber/internal/engine"
	"github.com/keyorder/keyorder/subscriber/internal/push"
)

// Parking from push. A push endpoint with WithParking keeps the control
// log as a Receive does, for as long as the endpoint is open: Push
// starts it when PushHandler makes the endpoint, retrying until it is up,
// and Close stops it. A push of a keyed message then goes through the same
// steps as a delivery to a lane that holds nothing of its key (the service
// keeps one message of a key outstanding, so every push is one):
//
//  1. The barrier (internal/barrier): the push waits for a marker unless a
//     marker sent within the parking wait has come back.
//  2. If the view shows the key parked, the message moves to the parking
//     topic (Parking.move) and is acked: 204.
//  3. Otherwise it runs through the call path; if it fails for good, its
//     key parks with it, and it is acked once the park has ripened.
//
// Every push waits for the log to be up, the first ones a round trip or
// two, since what the call path and Release read of parking is set then;
// and the endpoint is the subscription's running receiver (Stats, Release)
// from then on. If the log is lost after, keyed pushes are answered 503,
// for the service to push them again; pushes without a key run as before,
// as parking governs nothing of theirs.

// Push runs the control log for a push endpoint.
type Push struct {
	cfg   Config
	door  *engine.ParkingDoor
	onUp  func(*Parking) // told of the parking once it is up
	ready chan struct{}  // closed once parked is set
	// lost is closed if the log stops being followed after it was up;
	// keyed pushes are then answered 503 until Close, unkeyed ones run.
	lost   chan struct{}
	stop   context.CancelFunc // ends the starting loop
	done   chan struct{}      // closed when the loop returns
	parked *Parking           // the parking, once ready
}

// StartPush starts the control log for door, a push endpoint engine's, on
// a goroutine of its own, until stopped; onUp is called with the parking
// once it is up, before any push is let through.
func StartPush(cfg Config, door *engine.ParkingDoor, onUp func(*Parking)) *Push {
	ctx, cancel := context.WithCancel(context.Background())
	pp := &Push{cfg: cfg, door: door, onUp: onUp, ready: make(chan struct{}), lost: make(chan struct{}), stop: cancel, done: make(chan struct{})}
	go pp.run(ctx)
	return pp
}

func (pp *Push) run(ctx context.Context) {
	defer close(pp.done)
	for tries := 1; ; tries++ {
		p, rctx, err := Start(ctx, pp.cfg, pp.door) // attaches p
		if rctx != nil {
			pp.parked = p
			pp.onUp(p)
			close(pp.ready)
			<-rctx.Done()
			if ctx.Err() == nil {
				pp.cfg.Log.Error("keyorder/subscriber: the push endpoint's parking control log is no longer followed; keyed pushes are answered 503 until Close; pushes without a key run",
					"error", context.Cause(rctx))
				close(pp.lost)
			}
			return
		}
		if ctx.Err() != nil {
			return
		}
		pp.cfg.Log.Warn("keyorder/subscriber: could not start the push endpoint's parking control log; will try again",
			"error", err)
		t := time.NewTimer(pp.cfg.Backoff(tries))
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return
		}
	}
}

// await returns the parking component once it is up, or an error if ctx
// ends first, the endpoint closes, or the log was lost (errParkingLost,
// after parked was set). Once it has
// returned, parked may be read: it was set before ready was closed.
func (pp *Push) Await(ctx context.Context) (push.Parked, error) {
	select {
	case <-pp.lost:
		return nil, push.ErrParkingLost
	default:
	}
	select {
	case <-pp.ready:
		return pp.parked, nil
	case <-pp.lost:
		return nil, push.ErrParkingLost
	case <-pp.door.Stopping():
		return nil, push.ErrShuttingDown
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// Told tells the WithKeyEvents callback, and the log, that a push parked
// key since then.
func (pp *Push) Told(key string, cause *engine.ParkCause, since time.Time) {
	pp.door.Parked(key, cause, since)
}

// up returns the parking component if it is up, else nil.
func (pp *Push) up() *Parking {
	select {
	case <-pp.ready:
		return pp.parked
	default:
		return nil
	}
}

// drain waits, at Close, for the releases running in the endpoint; a new
// one is refused.
func (pp *Push) Drain() {
	if p := pp.up(); p != nil {
		p.rel.close()
	}
}

// cancel gives up on what parking has under way, once Close has waited
// the drain: the releases' waits and the moves to the parking topic.
func (pp *Push) Cancel() {
	if p := pp.up(); p != nil {
		p.cancelOps()
	}
}

// close stops the control log, once the endpoint has drained: its
// starting loop, then the log itself.
func (pp *Push) Close() {
	pp.stop()
	<-pp.done
	if p := pp.parked; p != nil {
		p.rel.close() // came up while Close drained
		p.cancelOps()
		_ = p.Stop(nil)
	}
}

package subscriber

import (
	"context"
	"time"
)

// Parking's side of the barrier (internal/barrier): the markers go through
// the control log, a lane's deliveries wait for their fence (lane_park.go),
// and sync waits for the next marker, as Release and Parked do before
// they read the view.

// sync waits until the control log has applied every event published
// before the call, or returns ctx.Err(): it waits for the barrier's next
// marker, which it shares with the lanes.
func (p *parking) sync(ctx context.Context) error {
	return p.syncTo(ctx, p.b.Want())
}

// syncTo waits until marker fence has come back, or returns ctx.Err(), or
// ErrNotReceiving once the Receive stops.
func (p *parking) syncTo(ctx context.Context, fence uint64) error {
	select {
	case <-p.b.Await(fence):
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-p.r.stopping:
		return ErrNotReceiving
	}
}

// barrierRound runs a round of the barrier's markers, each sent through
// the control log, again after a backoff if the publish fails (at once if
// it failed as another's tail: controlRetry). Run by the parking loop.
func (p *parking) barrierRound() {
	p.b.Round(func() bool {
		for tries := 0; ; {
			err := p.log.Sync(p.ops)
			if err == nil {
				return true
			}
			var wait time.Duration
			wait, tries = p.r.controlRetry(tries, err)
			select {
			case <-p.stopLoop:
				return false
			case <-p.ops.Done():
				return false
			case <-time.After(wait):
			}
		}
	})
}

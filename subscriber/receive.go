package subscriber

import (
	"context"

	"github.com/keyorder/keyorder/subscriber/internal/engine"
	"github.com/keyorder/keyorder/subscriber/internal/parking"
)

// Receive calls h for each message of the subscription until ctx ends,
// then shuts down, and returns nil; it returns early with the official
// client's error if receiving fails for good.
//
//   - A key's deliveries run one at a time, in the order they arrive, on
//     the key's partition; with [WithUnorderedRedelivery], a stamped
//     delivery waiting to run goes before the waiting ones of its
//     producer with higher numbers. Different keys run in parallel, up to
//     [WithWorkers] handlers at once (S3).
//   - A message is acked only after h has returned nil for it (S4).
//   - When h fails or panics, the message is called again after a
//     backoff, while its key waits without holding a worker; its key's
//     later deliveries wait behind it. When it fails for good, it is
//     nacked with every delivery of its key queued behind it, unrun, and
//     the key is held until the service brings it back, so that no later
//     message of the key runs before it has succeeded. Other keys go on
//     (S5, S9).
//   - With [WithParking], a message that fails for good parks its key
//     instead: it and the key's later messages go to the parking topic
//     until [Subscription.Release]. Receive first replays the parking
//     control log, and returns its error if it cannot follow it; it
//     carries out the release requests recorded there
//     ([Subscription.RequestRelease]), through h.
//   - A key queues at most [WithKeyBacklog] deliveries once the
//     subscription holds half its flow-control window; past that, its
//     deliveries are nacked, so that a slow or failing key cannot starve
//     the others (S10).
//   - A message processed earlier in this Receive that comes back, as part
//     of a redelivered tail or after a lost ack, is acked without calling h
//     (S6, [WithDedupWindow]).
//   - Every delivery is acked or nacked exactly once, whatever h does
//     (S11).
//   - When ctx ends, Receive stops pulling, nacks the deliveries queued and
//     not started, lets running handlers finish until [WithDrainTimeout],
//     then cancels their context and waits for them. It returns after every
//     goroutine it started has exited (S7).
//
// Only one Receive runs at a time on a Subscription; a second one returns
// [ErrReceiving].
func (s *Subscription) Receive(ctx context.Context, h Handler) error {
	switch {
	case s == nil:
		return invalid("Receive on a nil Subscription")
	case h == nil:
		return invalid("Receive with nil handler")
	case s.push.Endpoint != "":
		return invalid("Receive on %s, a push subscription: serve its PushHandler", s.name)
	}
	if !s.receiving.CompareAndSwap(false, true) {
		return ErrReceiving
	}
	defer s.receiving.Store(false)

	r, err := s.newReceiver(ctx, h)
	if err != nil {
		return err
	}
	defer r.CancelHandlers()
	p, ctx, err := s.start(ctx, r)
	if ctx == nil {
		return err
	}
	s.parkNow.Store(p)
	defer s.parkNow.Store(nil)
	s.current.Store(r)
	defer s.current.Store(nil)

	var stop func(error) error // parking's, once the official Receive has returned
	if p != nil {
		stop = p.Stop
	}
	return r.Pull(ctx, s.client.Subscriber(s.name), stop)
}

// newReceiver makes the engine of a Receive, or of a push endpoint, of s,
// running h.
func (s *Subscription) newReceiver(ctx context.Context, h Handler) (*engine.Engine, error) {
	sub := engine.Facts{
		Name: s.name, Ordered: s.ordered, ExactlyOnce: s.exactlyOnce, Parks: s.parking != nil,
		DeadLetterAttempts: s.policies.maxDeliveryAttempts, Counts: &s.counts, Range: s.span,
	}
	return engine.New(ctx, &s.cfg.Config, sub, h)
}

// start starts what runs beside r's lanes: parking, which first catches
// up with its control log (internal/parking), and the watch of ack answers on an
// exactly-once subscription. It returns the parking, nil without
// WithParking, for Receive to stop once the official Receive has
// returned, and the context Receive must pull with, or a nil one, with
// the error or with nil if ctx ended meanwhile, when Receive must return
// at once; nothing it started then runs on.
func (s *Subscription) start(ctx context.Context, r *engine.Engine) (*parking.Parking, context.Context, error) {
	var p *parking.Parking
	if s.parking != nil {
		var err error
		if p, ctx, err = parking.Start(ctx, s.parkingConfig(), r.ParkingDoor()); ctx == nil {
			return nil, nil, err
		}
	}
	r.Start()
	return p, ctx, nil
}

// ShutdownBound is how long [Subscription.Receive], or
// [Subscription.Close] on a push endpoint, may take past the drain timeout
// ([WithDrainTimeout]) once its context ends (Close: once it is called),
// whatever the server does: up, gone, unreachable or hanging (S7). The
// drain timeout is the handlers' and the flights' to the parking topic;
// within the next 1.5 s acks are flushed, the leftovers nacked, the
// control log's last events sent and the subscriptions made for parking
// deleted, as far as the server answers; the rest is for returning. Give
// a process drain timeout plus ShutdownBound to stop, as Kubernetes'
// terminationGracePeriodSeconds.
//
// A server that does not answer by then keeps some of the official
// client's goroutines running past Receive's return: they wait for their
// requests in flight, retried up to the official client's timeouts (a
// minute), and exit on their own; Receive logs that it did not wait. What
// they did not send is what a process that died leaves: leases that run
// out, and subscriptions made for parking that expire after a day idle.
const ShutdownBound = engine.ShutdownBound

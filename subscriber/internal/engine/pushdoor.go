package engine

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"cloud.google.com/go/pubsub/v2"
)

// A PushDoor is the push endpoint's way into the engine
// (subscriber/internal/push): a request's message arrives (Arrive), runs
// through the call path in its key's lane, again after each delay its
// handler asks for while the request may be held, and is counted as the
// answer settles it (Call); a push that parking moved to the parking topic
// is counted by Parked. Stop stops the engine with the endpoint. The
// engine makes it (Engine.PushDoor); its methods are safe for concurrent
// use.
type PushDoor struct {
	r *Engine
}

// Arrive makes the job of m, pushed to the push endpoint, and counts it
// received. Its retries are the service's pushes (S5): the service's
// backoff spaces them.
func (d *PushDoor) Arrive(ctx context.Context, m *pubsub.Message) *Job {
	r := d.r
	r.sub.Counts.Received.Add(1)
	j := r.arrived(ctx, m)
	j.D.DeliveryAttempt = j.deliveryAttempt()
	j.retriesByNack = true
	return j
}

// A push request whose handler asks to wait (subscriber.RetryAfter, as
// the inbox does while a gap's missing number may still come) is called
// again within the request, after the delay, rather than answered 500 at
// once:
//
//   - The service's retry policy, not the handler, would space the pushes
//     otherwise, down to none at all, and each would count towards a
//     dead-letter policy's limit: a message waiting a second at a time
//     was pushed again and again, spending its deliveries within the wait.
//     So the delay is kept, for up to the endpoint's hold in all, within
//     the service's shortest ack deadline (10 s); then the answer is 500,
//     and the next push waits again.
//   - On the delivery that the dead-letter policy would forward, without
//     parking (which parks the key then, judge), the request is held as
//     long as it lives: answered 500, the message would be dead-lettered
//     and its key go on without it, which a failure for good on pull, and
//     with parking on push, never lets happen to a message that only waits.
//     Should the service give up on the request meanwhile, the message is
//     forwarded all the same, and the held call still runs it, once, before
//     the key's next push, which waits for its turn (push's keyGate).

// Call runs j through the call path in its key's lane, and again after
// each delay its handler asks for, for up to hold in all, or, on the
// delivery a dead-letter policy would forward, as long as ctx lives; the
// handler's context ends with ctx. Then it counts j as the push's answer
// settles it, and reports whether the answer acks j; a nack has the
// service push the message again, or dead-letter it. Once the engine
// stops (S7), it returns errStopped instead, for a 503. A verdict that
// parks j's key calls park, parking's step, with the handler's error: if
// it reports j moved to the parking topic, j is settled Parked, and acked;
// otherwise it is nacked. park is nil without parking.
func (d *PushDoor) Call(ctx context.Context, j *Job, hold time.Duration, park func(err error) bool) (bool, error) {
	v := d.callWaiting(ctx, j, hold)
	out := v.Out
	switch {
	case out == Parked && park != nil && park(v.Err):
		d.Parked(j)
		return true, nil
	case out.ForGood():
		out = Failed // not parked: nacked, for the service to push again or dead-letter
	}
	d.r.Count(j, out)
	if out == Shutdown {
		return false, errStopped
	}
	return out.Acks(), nil
}

// errStopped is what Call returns once the engine stops: the push is
// nacked, and answered 503, for the service to push it again.
var errStopped = errors.New("shutting down")

// callWaiting runs j through the call path, and again after each delay
// its handler asks for, as long as the request may be held.
func (d *PushDoor) callWaiting(ctx context.Context, j *Job, hold time.Duration) Verdict {
	r := d.r
	var held time.Duration
	for {
		v := d.callInLane(ctx, j)
		var later *RetryAfterError
		if v.Out != Retried || !errors.As(v.Err, &later) {
			return v
		}
		wait := max(v.Delay, r.Cfg.MinBackoff)
		if !r.DeadLettered(j) && held+wait > hold {
			return v
		}
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return v
		case <-r.stopping:
			t.Stop()
			return v
		}
		held += wait
	}
}

// callInLane runs j through the call path on a goroutine of its own, its
// key's lane showing it running meanwhile, and returns the verdict: a
// handler that exits its goroutine still gets its request answered (S11).
// The handler's context ends with ctx, as the service stops waiting for
// the answer then, or with the drain.
func (d *PushDoor) callInLane(ctx context.Context, j *Job) Verdict {
	r := d.r
	life, cancel := context.WithCancel(r.handlerCtx)
	defer cancel()
	defer context.AfterFunc(ctx, cancel)()
	j.life = life
	answer := make(chan Verdict, 1)
	go r.Call(j, laneCall{l: d.running(j), answer: answer})
	return <-answer
}

// running marks j as the running call of its key's lane, or of a lane of
// its own if it has no key, and returns the lane.
func (d *PushDoor) running(j *Job) *Lane {
	return d.r.Lanes.with(d.r, j.D.Key, func(l *Lane) {
		j.fresh = l.holdsNothing()
		l.Running, l.busySince = j, time.Now()
	})
}

// laneCall is the door of a call callInLane runs: it ends the call in the
// key's lane, where the held-key record notes the verdict, and hands the
// verdict to callInLane's caller, which delivers it as its answer. Key
// events are told last, once the answer can be written, so that a
// callback that exits the goroutine leaves nothing undone.
type laneCall struct {
	l      *Lane
	answer chan<- Verdict
}

func (a laneCall) Settle(j *Job, v Verdict) {
	fx := a.l.pushed(j, v)
	a.answer <- v
	a.l.r.apply(a.l, &fx)
}

// Parked counts j, a push that parking moved to the parking topic, as
// parked: nothing to ack, the push's answer acks it.
func (d *PushDoor) Parked(j *Job) {
	var fx Effects
	d.r.Parked(&fx, j)
	d.r.Count(j, Parked)
}

// Refused counts and logs a push request refused with status for err,
// before the handler ran.
func (d *PushDoor) Refused(ctx context.Context, status int, err error) {
	d.r.Obs.pushRefused(ctx, status, err)
}

// Log is the engine's logger, its subscription named.
func (d *PushDoor) Log() *slog.Logger { return d.r.Obs.Log }

// Stop stops the engine of a push endpoint that refuses new requests
// already, in the order of S7:
//
//  1. The shutdown's clock starts, which bounds the waits for the server
//     (ShutdownBound), until Stop returns; Stopping closes: the calls
//     waiting to run again, and parking's waits, end.
//  2. drain runs, on a goroutine of Stop's, until the requests at work
//     have ended; Stop waits for it until the drain timeout, or until ctx
//     ends.
//  3. The handlers' context is cancelled, then cancel is called, for what
//     the endpoint has under way; and drain is waited for to its end.
//  4. closed is called, then the metrics' gauges stop.
func (d *PushDoor) Stop(ctx context.Context, drain, cancel, closed func()) {
	r := d.r
	r.Ending.begin(r.Cfg.DrainTimeout)
	defer r.Ending.end()
	close(r.stopping)
	drained := make(chan struct{})
	go func() {
		defer close(drained)
		drain()
	}()
	t := time.NewTimer(r.Cfg.DrainTimeout)
	defer t.Stop()
	select {
	case <-drained:
	case <-t.C:
	case <-ctx.Done():
	}
	r.CancelHandlers()
	cancel()
	<-drained
	closed()
	r.Obs.close()
}

package engine

import (
	"context"
	"errors"
	"maps"
	"strings"
	"time"

	"cloud.google.com/go/pubsub/v2"

	"github.com/keyorder/keyorder/ordering"
)

// The parking door: what parking (internal/parking) uses of the engine,
// beside the types its hooks pass (Job, ParkCause) and the lanes' view of
// it (Parking, lane_park.go). Parking moves a key's messages to the
// parking topic as copies the engine makes (Copy), runs them back through
// the call path in a release (RunParked), tells of the parks and unparks
// it records (Parked, Unparked), and keeps to the engine's shutdown
// (Attach, Stopping, Deadline). It never reads or writes a field of the
// engine's.

// A ParkingDoor is an engine's side of its parking (Engine.ParkingDoor),
// which the door that starts parking (the facade's Receive or push
// endpoint) gives it.
type ParkingDoor struct{ r *Engine }

// Attach gives the lanes and the call path p, the parking started on d,
// before the first delivery. When the engine shuts down, p.Shutdown gets
// what is left of the drain timeout, as the handlers had: once it is up,
// the handlers still running (a release's) are cancelled and giveUp is
// called, for p to give up on its waits, and p.Shutdown is awaited still.
func (d *ParkingDoor) Attach(p Parking, giveUp func()) {
	d.r.SetParking(&drainedParking{Parking: p, r: d.r, giveUp: giveUp})
}

// drainedParking is a parking whose Shutdown keeps to the drain timeout
// (Attach).
type drainedParking struct {
	Parking
	r      *Engine
	giveUp func()
}

func (p *drainedParking) Shutdown() {
	drained, timedOut := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(timedOut)
		t := time.NewTimer(time.Until(p.r.Ending.DrainEnd(p.r.Cfg.DrainTimeout)))
		defer t.Stop()
		select {
		case <-t.C:
			p.r.CancelHandlers()
			p.giveUp()
		case <-drained:
		}
	}()
	p.Parking.Shutdown()
	close(drained)
	<-timedOut
}

// Stopping is closed when the engine stops: Receive's ctx ended, pulling
// failed, or a push endpoint's Close began.
func (d *ParkingDoor) Stopping() <-chan struct{} { return d.r.Stopping() }

// Deadline returns a context that ends when the shutdown's waits for the
// server must give up (ShutdownBound), and never before the shutdown
// began.
func (d *ParkingDoor) Deadline() context.Context { return d.r.Ending.Deadline() }

// Parked tells the WithKeyEvents callback, and the log, that key was
// parked since since, cause being the message that parked it.
func (d *ParkingDoor) Parked(key string, cause *ParkCause, since time.Time) {
	d.tell(KeyParked, key, cause, since, "")
}

// Unparked tells the WithKeyEvents callback, and the log, that a release
// ran key's parked messages and unparked it; cause is the message that
// parked it, since when.
func (d *ParkingDoor) Unparked(key string, cause *ParkCause, since time.Time) {
	d.tell(KeyUnparked, key, cause, since, ReasonReleased)
}

func (d *ParkingDoor) tell(kind KeyEventKind, key string, cause *ParkCause, since time.Time, reason string) {
	k := HeldKey{Key: key, MessageID: cause.ID, Since: since, Attempt: cause.Attempt}
	if cause.Err != "" {
		k.Err = errors.New(cause.Err)
	}
	d.r.Emit(KeyEvent{Kind: kind, HeldKey: k, Reason: reason, At: time.Now()})
}

// Copy returns j's message as the service first delivered it, for its
// copy on the parking topic: its ID, ordering key, data, publish time and
// attributes, its stamp and the stamp's signature put back in them (the
// Delivery took them out), ordering.Header taken out (the key travels as
// the ordering key, P2). The attributes are a map of the copy's own.
//
// The stamp goes with the copy because the released message is the same
// message of the same producer: a store that applies it once
// (examples/inbox) must know it, and the release verifies it again
// (RunParked).
func (d *ParkingDoor) Copy(j *Job) *pubsub.Message {
	m := j.Msg
	attrs := make(map[string]string, len(m.Attributes)+ordering.StampAttributes+1)
	for k, v := range m.Attributes {
		if k != ordering.Header {
			attrs[k] = v
		}
	}
	if j.D.Seq != 0 {
		ordering.Stamp{Producer: j.D.Producer, Seq: j.D.Seq}.Put(attrs)
		if j.Stamp.Sig != "" {
			attrs[ordering.SignatureAttribute] = j.Stamp.Sig
		}
	}
	return &pubsub.Message{ID: j.D.ID, OrderingKey: j.D.Key, Data: m.Data, Attributes: attrs, PublishTime: m.PublishTime}
}

// A ReleaseDoor is a release's side of the call path (RunParked): what
// became of the parked message it runs. Ran and FailedAgain are called on
// the calling goroutine, before the next message runs, even when the
// handler exits it.
type ReleaseDoor interface {
	// Ran records that the message id ran, or had been processed
	// already: it is released.
	Ran(id string) error
	// FailedAgain records that the message id failed for good again,
	// with err: the release stops, the key staying parked with it at its
	// head (the call path gave it fresh attempts for the next release).
	FailedAgain(id string, err error) error
	// Stopped is the error of a message not run because the engine
	// stopped: no retries once shutting down (S7).
	Stopped() error
}

// RunParked runs m, a parked message as the service first delivered it
// (its ID, ordering key and publish time; its data and attributes read
// from its copy on the parking topic, keyorder's own attributes left out),
// through the call path, on a goroutine of its own per call, as a push
// request's call runs: a handler that exits its goroutine is a failed
// call, retried, as on every door. Its stamp counts if it verifies again
// (CheckReleased); it calls the handler with fresh attempts.
//
// It returns what rd returns: Ran's once the message ran, or was found
// processed already (counted in Stats.Released); FailedAgain's if it
// fails for good again, once the WithKeyEvents callback is told that the
// key is parked with it first; Stopped's once the engine stops. Between
// calls it waits the call path's delay, and returns ctx.Err() if ctx ends
// first.
func (d *ParkingDoor) RunParked(ctx context.Context, m *pubsub.Message, rd ReleaseDoor) error {
	r := d.r
	j := &Job{Ctx: ctx, D: releasedDelivery(m), Redriven: IsRedriven(m.Attributes)}
	r.CheckReleased(j, m)
	rc := &releaseCall{r: r, rd: rd}
	for {
		called := make(chan struct{})
		go func() {
			defer close(called)
			r.Call(j, rc)
		}()
		<-called
		switch v := rc.last; {
		case v.Out == Acked || v.Out == Deduplicated:
			return rc.err
		case v.Out == Shutdown:
			return rd.Stopped()
		case v.Out.ForGood():
			d.Parked(j.D.Key, CauseOf(j, v.Err), time.Now()) // it stays parked, with this message first
			return rc.err
		}
		if err := d.wait(ctx, rc.last.Delay, rd); err != nil {
			return err
		}
	}
}

// wait waits delay, or returns why the release must stop first.
func (d *ParkingDoor) wait(ctx context.Context, delay time.Duration, rd ReleaseDoor) error {
	t := time.NewTimer(delay)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-d.r.Stopping():
		return rd.Stopped()
	}
}

// releaseCall is the Door of one call of a parked message (RunParked):
// it keeps the verdict for RunParked, and tells rd what it settles.
type releaseCall struct {
	r  *Engine
	rd ReleaseDoor
	// last is the call's verdict, and err what rd returned of it;
	// written by the call's goroutine before it ends.
	last Verdict
	err  error
}

func (c *releaseCall) Settle(j *Job, v Verdict) {
	c.last, c.err = v, nil
	switch {
	case v.Out == Acked || v.Out == Deduplicated:
		c.r.sub.Counts.Released.Add(1)
		c.err = c.rd.Ran(j.D.ID)
	case v.Out.ForGood():
		c.err = c.rd.FailedAgain(j.D.ID, v.Err)
	}
}

// releasedDelivery is the Delivery of m, a parked message as RunParked
// takes it: as it was first delivered, its stamp included, without
// keyorder's attributes.
func releasedDelivery(m *pubsub.Message) Delivery {
	var st ordering.Stamp
	if parsed, err := ordering.ParseStamp(m.Attributes); err == nil {
		st = parsed
	}
	headers := maps.Clone(m.Attributes)
	for k := range headers {
		if strings.HasPrefix(k, "keyorder-") {
			delete(headers, k)
		}
	}
	if headers == nil {
		headers = map[string]string{}
	}
	headers[ordering.Header] = m.OrderingKey
	return Delivery{ID: m.ID, Key: m.OrderingKey, Data: m.Data, Headers: headers, PublishTime: m.PublishTime, Producer: st.Producer, Seq: st.Seq}
}

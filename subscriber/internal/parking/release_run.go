package parking

import (
	"context"
	"errors"
	"fmt"
	"time"

	"cloud.google.com/go/pubsub/v2"
	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/keyorder/keyorder/subscriber/internal/controllog"
	"github.com/keyorder/keyorder/subscriber/internal/engine"
	"github.com/keyorder/keyorder/subscriber/internal/ephemeral"
)

// A releaseRun is one release of one park. It reads the parking topic
// through a subscription of its own, filtered on the park, sought back to
// the park's start, and keeps the copies it reads until their turn: the
// order it runs them in is the log's, the order they were parked in.
type releaseRun struct {
	p     *Parking
	key   string
	park  string
	since time.Time
	sub   string
	// done holds the messages this run has released; content the copies
	// read and not run yet, by their message ID on the subscription.
	done    map[string]bool
	content map[string]*pubsub.Message
}

// releaseReadAhead bounds the copies a release reads ahead of the one it
// runs.
const releaseReadAhead = 64

// releaseLease is how long a release's claim holds without a heartbeat,
// after which another process may take the release over. It is a rule of
// the control log (controllog.Config.Lease), the same for every process;
// only a test that runs alone may change it (SetReleaseLease).
var releaseLease = 30 * time.Second

// SetReleaseLease sets how long a release's claim holds without a
// heartbeat, for a test that runs alone and must see one lapse, and
// returns a function that restores it.
func SetReleaseLease(d time.Duration) (restore func()) {
	old := releaseLease
	releaseLease = d
	return func() { releaseLease = old }
}

func (rr *releaseRun) run(ctx context.Context) (err error) {
	p := rr.p
	defer func() {
		if err != nil && !errors.Is(err, ErrParkedAgain) && !errors.Is(err, ErrReleasing) {
			rr.stop(nil, "", "") // the key stays parked; a later Release goes on from here
		}
	}()
	copies, readErr, stopReading, err := rr.read(ctx)
	if err != nil {
		return err
	}
	defer stopReading()
	beat, stopBeat := rr.heartbeat()
	defer stopBeat()
	for {
		changed := p.log.Changes()
		rec := p.log.Lookup(rr.key)
		switch {
		case rec == nil || rec.ParkID != rr.park:
			return fmt.Errorf("%w: %q was unparked by another process", ErrReleasing, rr.key)
		case rec.Owner != p.log.ID():
			return fmt.Errorf("%w: %q, taken over by another process", ErrReleasing, rr.key)
		}
		next := ""
		for _, id := range rec.IDs {
			if !rec.IsReleased(id) && !rr.done[id] {
				next = id
				break
			}
		}
		if next == "" {
			v, err := p.log.Record(ctx, controllog.Event{Kind: controllog.Unpark, Key: rr.key, ParkID: rr.park, N: len(rec.IDs)})
			switch {
			case err != nil:
				return err
			case v.Applied:
				p.door.Unparked(rr.key, &engine.ParkCause{ID: rec.Msg, Err: rec.Err}, rr.since)
				return nil
			case v.Ended:
				return nil
			}
			continue // more were parked meanwhile
		}
		if m := rr.content[next]; m != nil {
			if err := rr.runOne(ctx, next, m); err != nil {
				return err
			}
			continue
		}
		select {
		case m := <-copies:
			id := m.Attributes[AttrMessageID]
			if !rec.IsReleased(id) && !rr.done[id] && rr.content[id] == nil {
				rr.content[id] = m
			}
		case <-changed:
		case err := <-beat:
			return err
		case err := <-readErr:
			return fmt.Errorf("keyorder/subscriber: reading the parking topic: %w", err)
		case <-ctx.Done():
			return ctx.Err()
		case <-p.door.Stopping():
			return ErrNotReceiving
		}
	}
}

// read creates the run's subscription on the parking topic and receives
// from it into copies until stop is called, which also deletes it. readErr
// gets the official Receive's error if it fails.
func (rr *releaseRun) read(ctx context.Context) (copies <-chan *pubsub.Message, readErr <-chan error, stop func(), err error) {
	p := rr.p
	client := p.cfg.Client
	rr.sub = ephemeral.Name(p.cfg.Name, "subscriptions", "-release-"+ephemeral.NewID())
	admin := client.SubscriptionAdminClient
	if _, err := admin.CreateSubscription(ctx, ephemeral.Subscription(rr.sub, p.cfg.Topics.Park, `attributes.`+AttrParkID+` = "`+rr.park+`"`)); err != nil {
		return nil, nil, nil, fmt.Errorf("keyorder/subscriber: creating a release subscription: %w", err)
	}
	remove := func() { ephemeral.Remove(p.door.Deadline(), client, rr.sub) }
	if _, err := admin.Seek(ctx, &pubsubpb.SeekRequest{
		Subscription: rr.sub, Target: &pubsubpb.SeekRequest_Time{Time: timestamppb.New(rr.since.Add(-seekMargin))},
	}); err != nil {
		remove()
		return nil, nil, nil, fmt.Errorf("keyorder/subscriber: seeking a release subscription: %w", err)
	}
	out := make(chan *pubsub.Message, releaseReadAhead)
	errs := make(chan error, 1)
	rctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	s := client.Subscriber(rr.sub)
	s.ReceiveSettings.NumGoroutines = 1
	s.ReceiveSettings.MaxOutstandingMessages = releaseReadAhead
	done := make(chan struct{})
	go func() {
		defer close(done)
		err := s.Receive(rctx, func(ctx context.Context, m *pubsub.Message) {
			select {
			case out <- m:
				m.Ack() // kept in memory until it runs; a run that stops reads again
			case <-ctx.Done():
				m.Nack()
			}
		})
		if err != nil {
			errs <- err
		}
	}()
	return out, errs, func() {
		cancel()
		select {
		case <-done:
		case <-p.door.Deadline().Done(): // S7: the official client's goroutine ends on its own
		}
		remove()
	}, nil
}

// heartbeat renews the run's claim while it runs, so that no other process
// takes the release over, even while a handler call is long. The channel
// gets an error if the claim is lost; stop ends the heartbeat and waits for
// it.
func (rr *releaseRun) heartbeat() (lost <-chan error, stop func()) {
	p := rr.p
	errs := make(chan error, 1)
	quit, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(releaseLease / 3)
		defer tick.Stop()
		for {
			select {
			case <-quit:
				return
			case <-tick.C:
				v, err := p.log.Record(p.ops, controllog.Event{Kind: controllog.Claim, Key: rr.key, ParkID: rr.park})
				if err == nil && !v.Applied && !v.Ended {
					errs <- fmt.Errorf("%w: %q, taken over by another process", ErrReleasing, rr.key)
					return
				}
			}
		}
	}()
	return errs, func() { close(quit); <-done }
}

// runOne runs the parked message id, whose copy is m, through the call
// path (engine.ParkingDoor.RunParked), with the retries of any message, and
// records it in the control log once it has run, or was skipped as
// processed already, before the next runs. It returns an error matching
// ErrParkedAgain if it fails for good; the key then stays parked.
func (rr *releaseRun) runOne(ctx context.Context, id string, m *pubsub.Message) error {
	published, _ := time.Parse(time.RFC3339Nano, m.Attributes[AttrPublishTime])
	first := &pubsub.Message{ID: id, OrderingKey: rr.key, Data: m.Data, Attributes: m.Attributes, PublishTime: published}
	return rr.p.door.RunParked(ctx, first, rr)
}

// Ran, FailedAgain and Stopped are a release's door
// (engine.ReleaseDoor): a parked message that ran, or was skipped as
// processed already, is recorded in the control log before the next one
// runs; one that failed for good stops the release, the key staying
// parked with it at the head (the call path gave it fresh attempts for
// the next release).
func (rr *releaseRun) Ran(id string) error {
	rr.done[id] = true
	delete(rr.content, id)
	return rr.progress(id)
}

func (rr *releaseRun) FailedAgain(id string, err error) error {
	rr.stop(err, id, err.Error())
	return fmt.Errorf("%w: %q at message %s: %w", ErrParkedAgain, rr.key, id, err)
}

// Stopped: no retries once shutting down (S7); the key stays parked.
func (rr *releaseRun) Stopped() error { return ErrNotReceiving }

// progress records that the parked message id was released. It is
// recorded even if the release's ctx has ended meanwhile: what ran must
// not run again.
func (rr *releaseRun) progress(id string) error {
	p := rr.p
	for tries := 0; ; {
		err := p.log.Publish(p.ops, controllog.Event{Kind: controllog.Progress, Key: rr.key, ParkID: rr.park, IDs: []string{id}})
		if err == nil {
			return nil
		}
		var wait time.Duration
		wait, tries = controlRetry(tries, err)
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-p.ops.Done():
			t.Stop()
			return err
		}
	}
}

// stop ends the run's claim, the key staying parked; with err, the
// message id failed for good again.
func (rr *releaseRun) stop(err error, id, msg string) {
	ctx, cancel := context.WithTimeout(rr.p.ops, 10*time.Second)
	defer cancel()
	ev := controllog.Event{Kind: controllog.Stop, Key: rr.key, ParkID: rr.park}
	if err != nil {
		ev.Msg, ev.Err = id, truncateUTF8(msg, 4096)
	}
	_ = rr.p.log.Publish(ctx, ev)
}

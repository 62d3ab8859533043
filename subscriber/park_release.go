package subscriber

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strings"
	"sync"
	"time"

	"cloud.google.com/go/pubsub/v2"
	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/keyorder/keyorder/ordering"
	"github.com/keyorder/keyorder/subscriber/internal/controllog"
	"github.com/keyorder/keyorder/subscriber/internal/ephemeral"
)

// A ParkedKey is a key parked by [WithParking]: its messages go to the
// parking topic, and none runs until its release ([Subscription.Release],
// [Subscription.RequestRelease]).
type ParkedKey struct {
	Key string
	// Since is when the key was parked, by the service's clock.
	Since time.Time
	// Messages counts the key's messages parked and not released yet.
	Messages int
	// MessageID is the message whose failure parked the key, or that
	// failed again in a release.
	MessageID string
	// LastError is that message's last error.
	LastError string
	// Releasing is set while a release of the key runs, on any process.
	Releasing bool
	// ReleaseRequested is when a release of the key was asked for, by
	// [Subscription.RequestRelease] or a Release where no Receive runs,
	// and not carried out yet, by the service's clock; zero when none is
	// pending. ReleaseRequestedBy is who asked: the asking program's name,
	// host and process ID.
	ReleaseRequested   time.Time
	ReleaseRequestedBy string
}

// Parked lists the keys parked now, oldest first, as every process
// receiving the subscription sees them: from the running Receive, once it
// has caught up with the control log, or else from a replay of the log.
// It returns an error matching [ErrNoParking] without [WithParking], and
// ctx.Err() if ctx ends first.
//
// Parked returns by its ctx, whatever the control topic does: if ctx ends
// before the running Receive has caught up, it returns the keys as that
// Receive last saw them, with ctx.Err(); without a Receive, it returns
// ctx.Err() within about a second, as a replay that did not finish knows
// nothing whole.
func (s *Subscription) Parked(ctx context.Context) (_ []ParkedKey, err error) {
	defer func() { err = ended(ctx, "listing parked keys", err) }()
	if s == nil {
		return nil, invalid("Parked on a nil Subscription")
	}
	if s.parking == nil {
		return nil, ErrNoParking
	}
	if r := s.current.Load(); r != nil && r.park != nil {
		err := r.park.sync(ctx)
		switch {
		case err == nil:
			return parkedKeys(r.park.log), nil
		case ctx.Err() != nil:
			return parkedKeys(r.park.log), err // what it knows: as of the last event applied
		case !errors.Is(err, ErrNotReceiving):
			return nil, err
		}
	}
	lg, err := s.openLog(ctx)
	if err != nil {
		return nil, err
	}
	list := parkedKeys(lg)
	_ = lg.Close()
	return list, nil
}

// parkedKeys lists the keys parked in lg's state, oldest first.
func parkedKeys(lg *controllog.Log) []ParkedKey {
	sums := lg.List()
	out := make([]ParkedKey, len(sums))
	for i, k := range sums {
		out[i] = ParkedKey(k) // the same fields
	}
	return out
}

// Release runs key's parked messages through the handler, in the order
// they were parked, each exactly once, then unparks the key: its later
// messages run as they come, and those that went to the parking topic
// meanwhile run first. It returns nil once the key is unparked.
//
// Where a Receive runs on s, the release runs in it: the handler calls run
// on the calling goroutine, one at a time, with the retries, backoff and
// attempts of any message; they count against no worker of [WithWorkers].
// Where none runs on s, as in an operator's command, Release asks for the
// release as [Subscription.RequestRelease] does and waits while a Receive
// of the subscription, on any process, carries it out: through its
// handler, in the same order. If ctx ends first, Release returns ctx.Err()
// and the request stays recorded, for a Receive to carry out.
//
// Each message's success is recorded in the control log before the next
// one runs, so a release stopped in the middle (its ctx ends, Receive
// stops, the process dies) loses and reorders nothing: the key stays
// parked with what is left, which a later release, on any process, runs.
// A message whose handler succeeded but whose record was lost with the
// process runs again then, as an unacked message would.
//
// If a parked message fails for good again, the release stops there, the
// key stays parked, and Release returns an error matching
// [ErrParkedAgain] and wrapping the handler's error (where no Receive runs
// on s, an error with its text, as the log keeps it).
//
// Release returns an error matching [ErrNotParked] when the key is not
// parked, at once, which also matches [ErrReleased] if a release unparked
// it within the last hour; [ErrNoParking] without [WithParking]; and ctx.Err()
// when ctx ends first. Where a Receive runs on s, it also returns
// [ErrNotReceiving] when that Receive stops during the release, and
// [ErrReleasing] when another release of the key runs, here or on another
// process (one whose process died is taken over after 30 s without a sign
// of life); where none runs, Release waits for such a release to end, and
// returns an error matching [ErrWithdrawn] if its request is withdrawn
// ([Subscription.WithdrawRelease]) before a release of it begins.
func (s *Subscription) Release(ctx context.Context, key string) (err error) {
	defer func() { err = ended(ctx, "releasing", err) }()
	if s == nil {
		return invalid("Release on a nil Subscription")
	}
	if s.parking == nil {
		return ErrNoParking
	}
	if r := s.current.Load(); r != nil && r.park != nil && !r.stopped() {
		return r.park.release(ctx, key)
	}
	return s.askRelease(ctx, key, true)
}

// releases counts the releases running in a Receive, so that it stops
// only after they have. Guarded by mu.
type releases struct {
	mu     sync.Mutex
	closed bool            // the Receive is stopping: no new release
	keys   map[string]bool // the keys being released here
	wg     sync.WaitGroup
	// kick gets a signal when a release ends, for the watch of release
	// requests; made on first use, under mu.
	kick chan struct{}
}

// ended returns the channel that gets a signal when a release ends.
func (rs *releases) ended() <-chan struct{} {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	if rs.kick == nil {
		rs.kick = make(chan struct{}, 1)
	}
	return rs.kick
}

func (rs *releases) enter(key string) error {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	switch {
	case rs.closed:
		return ErrNotReceiving
	case rs.keys[key]:
		return fmt.Errorf("%w: %q, by this Receive", ErrReleasing, key)
	}
	if rs.keys == nil {
		rs.keys = map[string]bool{}
	}
	rs.keys[key] = true
	rs.wg.Add(1)
	return nil
}

func (rs *releases) exit(key string) {
	rs.mu.Lock()
	delete(rs.keys, key)
	kick := rs.kick
	rs.mu.Unlock()
	if kick != nil {
		select {
		case kick <- struct{}{}:
		default:
		}
	}
	rs.wg.Done()
}

// close refuses new releases and waits for those running.
func (rs *releases) close() {
	rs.mu.Lock()
	rs.closed = true
	rs.mu.Unlock()
	rs.wg.Wait()
}

// release is Release in a running Receive.
func (p *parking) release(ctx context.Context, key string) error {
	if err := p.rel.enter(key); err != nil {
		return err
	}
	defer p.rel.exit(key)
	if err := p.sync(ctx); err != nil {
		return err
	}
	return p.claimAndRun(ctx, key, time.Time{})
}

// claimAndRun claims the release of key's park and runs it. The caller has
// entered the key in p.rel, and synced with the log since it decided to.
// A run that carries out a request names it, asked (its time), and the
// log refuses its claim unless the request is still pending: then
// nothing runs, and it returns errRequestEnded. A Release's own run
// passes zero.
func (p *parking) claimAndRun(ctx context.Context, key string, asked time.Time) error {
	rec := p.log.Lookup(key)
	if rec == nil {
		return notParked(p.log, key, fmt.Errorf("%w: %q", ErrNotParked, key))
	}
	claim := controllog.Event{Kind: controllog.Claim, Key: key, ParkID: rec.ParkID}
	if !asked.IsZero() {
		claim = controllog.ClaimFor(controllog.PendingRelease{Key: key, ParkID: rec.ParkID, Requested: asked})
	}
	v, err := p.log.Record(ctx, claim)
	switch {
	case err != nil:
		return err
	case v.ParkID != rec.ParkID:
		return fmt.Errorf("%w: %q", ErrNotParked, key)
	case !v.Applied && !asked.IsZero() && !stillAsked(p.log.Pending(key, rec.ParkID), asked):
		return errRequestEnded // the state is no older than the verdict
	case !v.Applied:
		return fmt.Errorf("%w: %q, by another process", ErrReleasing, key)
	}
	run := &releaseRun{p: p, key: key, park: rec.ParkID, since: rec.Since, done: map[string]bool{}, content: map[string]*pubsub.Message{}}
	return run.run(ctx)
}

// stillAsked reports whether pending, a park's pending request or nil, is
// the request made at asked.
func stillAsked(pending *controllog.PendingRelease, asked time.Time) bool {
	return pending != nil && pending.Requested.Equal(asked)
}

// A releaseRun is one release of one park. It reads the parking topic
// through a subscription of its own, filtered on the park, sought back to
// the park's start, and keeps the copies it reads until their turn: the
// order it runs them in is the log's, the order they were parked in.
type releaseRun struct {
	p     *parking
	key   string
	park  string
	since time.Time
	sub   string
	// done holds the messages this run has released; content the copies
	// read and not run yet, by their message ID on the subscription.
	done    map[string]bool
	content map[string]*pubsub.Message
	// last is the call path's verdict on the message running, and
	// recorded the error of recording it, if it ran (settle); written by
	// the call's goroutine before it ends.
	last     verdict
	recorded error
}

// releaseReadAhead bounds the copies a release reads ahead of the one it
// runs.
const releaseReadAhead = 64

// releaseLease is how long a release's claim holds without a heartbeat,
// after which another process may take the release over. It is a rule of
// the control log (controllog.Config.Lease), the same for every process;
// only a test that runs alone may change it (SetReleaseLease).
var releaseLease = 30 * time.Second

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
				p.told(KeyUnparked, rr.key, &parkCause{id: rec.Msg, err: rec.Err}, rr.since, ReasonReleased)
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
		case <-p.r.stopping:
			return ErrNotReceiving
		}
	}
}

// read creates the run's subscription on the parking topic and receives
// from it into copies until stop is called, which also deletes it. readErr
// gets the official Receive's error if it fails.
func (rr *releaseRun) read(ctx context.Context) (copies <-chan *pubsub.Message, readErr <-chan error, stop func(), err error) {
	p := rr.p
	client := p.r.s.client
	rr.sub = ephemeral.Name(p.r.s.name, "subscriptions", "-release-"+ephemeral.NewID())
	admin := client.SubscriptionAdminClient
	if _, err := admin.CreateSubscription(ctx, ephemeral.Subscription(rr.sub, p.topics.park, `attributes.`+AttrParkID+` = "`+rr.park+`"`)); err != nil {
		return nil, nil, nil, fmt.Errorf("keyorder/subscriber: creating a release subscription: %w", err)
	}
	remove := func() { ephemeral.Remove(p.r.ending.deadline(), client, rr.sub) }
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
		case <-p.r.ending.deadline().Done(): // S7: the official client's goroutine ends on its own
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
// path (call.go), with the retries of any message, and records it in the
// control log once it has run, or was skipped as processed already,
// before the next runs. It returns an error matching ErrParkedAgain if it
// fails for good; the key then stays parked.
//
// Each call runs on a goroutine of its own, as a push request's does, so
// that a handler that exits its goroutine is a failed call, retried, as
// on every door, and the release goes on.
func (rr *releaseRun) runOne(ctx context.Context, id string, m *pubsub.Message) error {
	j := &job{ctx: ctx, d: releasedDelivery(rr.key, id, m), redriven: isRedriven(m.Attributes)}
	rr.p.r.checkReleased(j, m)
	for {
		called := make(chan struct{})
		go func() {
			defer close(called)
			rr.p.r.call(j, rr)
		}()
		<-called
		switch v := rr.last; {
		case v.out == outAcked || v.out == outDeduplicated:
			return rr.recorded
		case v.out == outShutdown:
			return ErrNotReceiving // no retries once shutting down (S7); the key stays parked
		case v.out.forGood():
			rr.p.told(KeyParked, rr.key, causeOf(j, v.err), time.Now(), "") // it stays parked, with this message first
			return fmt.Errorf("%w: %q at message %s: %w", ErrParkedAgain, rr.key, id, v.err)
		default:
			if err := rr.wait(ctx, v.delay); err != nil {
				return err
			}
		}
	}
}

// settle is a release's door: a parked message that ran, or was skipped
// as processed already, is recorded in the control log before the next
// one runs; one that failed for good stops the release, the key staying
// parked with it at the head (the call path gave it fresh attempts for
// the next release).
func (rr *releaseRun) settle(j *job, v verdict) {
	rr.last = v
	id := j.d.ID
	switch {
	case v.out == outAcked || v.out == outDeduplicated:
		rr.done[id] = true
		delete(rr.content, id)
		rr.p.r.s.counts.released.Add(1)
		rr.recorded = rr.progress(id)
	case v.out.forGood():
		rr.stop(v.err, id, v.err.Error())
	}
}

// progress records that the parked message id was released. It is
// recorded even if the release's ctx has ended meanwhile: what ran must
// not run again.
func (rr *releaseRun) progress(id string) error {
	p := rr.p
	for tries := 1; ; tries++ {
		err := p.log.Publish(p.ops, controllog.Event{Kind: controllog.Progress, Key: rr.key, ParkID: rr.park, IDs: []string{id}})
		if err == nil {
			return nil
		}
		t := time.NewTimer(p.r.backoff(tries))
		select {
		case <-t.C:
		case <-p.ops.Done():
			t.Stop()
			return err
		}
	}
}

// wait waits d, or returns why the run must stop first.
func (rr *releaseRun) wait(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-rr.p.r.stopping:
		return ErrNotReceiving
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

// releasedDelivery is the Delivery of a parked copy: the message as it was
// first delivered, its stamp included, without the parking attributes.
func releasedDelivery(key, id string, m *pubsub.Message) Delivery {
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
	headers[ordering.Header] = key
	published, _ := time.Parse(time.RFC3339Nano, m.Attributes[AttrPublishTime])
	return Delivery{ID: id, Key: key, Data: m.Data, Headers: headers, PublishTime: published, Producer: st.Producer, Seq: st.Seq}
}

package subscriber

import (
	"context"
	"errors"
	"fmt"

	"sync"
	"time"

	"cloud.google.com/go/pubsub/v2"

	"github.com/keyorder/keyorder/subscriber/internal/controllog"
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

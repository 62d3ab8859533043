package parking

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"cloud.google.com/go/pubsub/v2"

	"github.com/keyorder/keyorder/internal/backoff"
	"github.com/keyorder/keyorder/publisher"
	"github.com/keyorder/keyorder/subscriber/internal/controllog"
)

// A ParkedKey is a key parked, as the facade's ParkedKey (an alias)
// documents it.
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

// Parked lists the keys parked now, for Subscription.Parked: from p, the
// running door's parking, once it has caught up with the control log, or
// else (p nil, or its door stopped) from a replay of the log.
func Parked(ctx context.Context, cfg Config, p *Parking) ([]ParkedKey, error) {
	if p != nil {
		err := p.sync(ctx)
		switch {
		case err == nil:
			return parkedKeys(p.log), nil
		case ctx.Err() != nil:
			return parkedKeys(p.log), err // what it knows: as of the last event applied
		case !errors.Is(err, ErrNotReceiving):
			return nil, err
		}
	}
	lg, err := openLog(ctx, cfg)
	if err != nil {
		return nil, err
	}
	list := parkedKeys(lg)
	_ = lg.Close()
	return list, nil
}

// Keys lists the keys parked in p's view, oldest first, for Stats.
func (p *Parking) Keys() []ParkedKey { return parkedKeys(p.log) }

// parkedKeys lists the keys parked in lg's state, oldest first.
func parkedKeys(lg *controllog.Log) []ParkedKey {
	sums := lg.List()
	out := make([]ParkedKey, len(sums))
	for i, k := range sums {
		out[i] = ParkedKey(k) // the same fields
	}
	return out
}

// Release is Subscription.Release: it runs key's release in p, the running
// door's parking, or else asks for it and waits while a Receive on any
// process carries it out.
func Release(ctx context.Context, cfg Config, p *Parking, key string) error {
	if p != nil && !p.stopped() {
		return p.release(ctx, key)
	}
	return askRelease(ctx, cfg, key, true)
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
func (p *Parking) release(ctx context.Context, key string) error {
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
func (p *Parking) claimAndRun(ctx context.Context, key string, asked time.Time) error {
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

// sync waits until the control log has applied every event published
// before the call, or returns ctx.Err(): it waits for the barrier's next
// marker, which it shares with the lanes.
func (p *Parking) sync(ctx context.Context) error {
	return p.syncTo(ctx, p.b.Want())
}

// syncTo waits until marker fence has come back, or returns ctx.Err(), or
// ErrNotReceiving once the Receive stops.
func (p *Parking) syncTo(ctx context.Context, fence uint64) error {
	select {
	case <-p.b.Await(fence):
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-p.door.Stopping():
		return ErrNotReceiving
	}
}

// stopped reports whether the engine of p's door has stopped.
func (p *Parking) stopped() bool {
	select {
	case <-p.door.Stopping():
		return true
	default:
		return false
	}
}

// barrierRound runs a round of the barrier's markers, each sent through
// the control log, again after controlRetry's wait if the publish fails.
// Run by the parking loop.
func (p *Parking) barrierRound() {
	p.b.Round(func() bool {
		for tries := 0; ; {
			err := p.log.Sync(p.ops)
			if err == nil {
				return true
			}
			var wait time.Duration
			wait, tries = controlRetry(tries, err)
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

// controlRetry returns the wait before the next try of a publish to the
// control log that failed with err, and the tries counted so far. An
// event failed as the tail of another's failure (a *publisher.PublishError
// that is Skipped) was never sent, and its key has resumed: it goes again
// at once, uncounted. Any other failure counts, and waits
// controlBackoff(tries).
func controlRetry(tries int, err error) (time.Duration, int) {
	if skippedTail(err) {
		return 0, tries
	}
	return controlBackoff(tries + 1), tries + 1
}

// skippedTail reports whether err is a publish failed unsent, as the tail
// of another message's failure.
func skippedTail(err error) bool {
	pe, ok := errors.AsType[*publisher.PublishError](err)
	return ok && pe.Skipped
}

// controlBackoff is the wait before the next try of a publish to the
// control log after its tries-th failure: 100 ms, doubling up to 2 s
// (backoff.Publish, which a lane's flight to the parking topic waits
// too). It is the control log's own, not WithBackoff's, which spaces a
// handler's retries and may be minutes: a marker, a release's progress or
// a claim that failed with another event's publish must not wait that
// long.
func controlBackoff(tries int) time.Duration { return backoff.Publish(tries) }

// startRequests starts the Receive's watch of release requests, counted in
// p.rel with the releases it runs, so that the shutdown waits for them
// (S7). Called by Start, before anything else runs.
func (p *Parking) startRequests() {
	p.rel.ended() // the channel exists before any release can end
	p.rel.wg.Add(1)
	go p.serveRequests()
}

// serveRequests carries out the release requests the control log holds
// until the Receive stops: it looks at them whenever the log moves, a
// release here ends (a run of its own, or a Release, which may leave a
// request it kept from being claimed), or a claim it waits for may have
// lapsed.
func (p *Parking) serveRequests() {
	defer p.rel.wg.Done()
	rt := &requestRuns{}
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		changed := p.log.Changes()
		next, ok := p.claimRequests(rt)
		if !ok {
			return
		}
		if !next.IsZero() {
			timer.Reset(time.Until(next))
		}
		select {
		case <-p.door.Stopping():
			return
		case <-changed:
		case <-p.rel.ended():
		case <-timer.C:
		}
	}
}

// claimRequests starts a release for each pending request that nobody
// releases and this Receive may try now, and returns when to look again
// for the others, zero for when the log moves; false once the Receive
// stops.
//
// What it sees may lag behind what this Receive wrote: a run here that
// has just ended published its stop, which may end the request, before
// the log applied it. So a run syncs with the log, and looks at the
// request again, before it claims.
func (p *Parking) claimRequests(rt *requestRuns) (next time.Time, ok bool) {
	pending := p.log.PendingReleases()
	rt.forgetBut(pending)
	claim, next := controllog.Claimable(pending, p.log.ID(), releaseLease, time.Now(), rt.after)
	for _, pr := range claim {
		switch err := p.rel.enter(pr.Key); {
		case errors.Is(err, ErrNotReceiving):
			return time.Time{}, false
		case err != nil:
			continue // a release of the key runs here already; its end wakes the watch
		}
		go p.carryOut(pr, rt)
	}
	return next, true
}

// carryOut runs the release pr asks for, entered in p.rel, and records
// its end in rt.
//
// The release runs user code, the handler and the WithKeyEvents callback,
// so what it leaves is cleaned up in a deferred call: a callback that
// exits the goroutine leaves the key unmarked, the wait group released
// and the watch woken, the run counting as one to try again.
func (p *Parking) carryOut(pr controllog.PendingRelease, rt *requestRuns) {
	err := errHandlerExitedRelease
	defer func() {
		over := errors.Is(err, ErrParkedAgain) || errors.Is(err, ErrNotParked) || errors.Is(err, ErrNotReceiving) || errors.Is(err, errRequestEnded)
		// A claim failed as another event's tail goes again at once; one
		// refused because the log still showed a releaser (ErrReleasing)
		// goes again when the log moves and no releaser is left or its
		// lease lapses, as Claimable tells: a backoff would hold a request
		// up to WithBackoff's wait after a release that gave up. A run
		// whose publish to the control log failed goes again after
		// controlBackoff; one that ended for another reason (the parking
		// topic unreadable, the clock) after the handler's backoff.
		retry := err != nil && !over && !skippedTail(err) && !errors.Is(err, ErrReleasing)
		backoff := p.cfg.Backoff
		if _, ok := errors.AsType[*publisher.PublishError](err); ok {
			backoff = controlBackoff
		}
		rt.ended(pr.Key, retry, backoff)
		p.rel.exit(pr.Key) // wakes the watch
		if err != nil && !errors.Is(err, ErrNotReceiving) && !errors.Is(err, ErrNotParked) && !errors.Is(err, ErrReleasing) && !errors.Is(err, errRequestEnded) && !skippedTail(err) {
			// ErrReleasing: another Receive won the claim, or took over.
			p.cfg.Log.LogAttrs(context.Background(), slog.LevelWarn, "keyorder/subscriber: release request failed",
				slog.String("key", pr.Key), slog.String("requested_by", pr.Requester), slog.Any("error", err), slog.Bool("retry", retry))
		}
	}()
	err = p.sync(p.ops)
	if err == nil && stillAsked(p.log.Pending(pr.Key, pr.ParkID), pr.Requested) {
		err = p.claimAndRun(p.ops, pr.Key, pr.Requested)
	}
}

// run is the parking component's loop: it sends the barrier's markers
// when lanes wait for one, and fails the Receive if the control log stops
// being followed.
func (p *Parking) run() {
	defer close(p.loopDone)
	gone := p.log.Gone()
	refresh := time.NewTimer(time.Hour)
	refresh.Stop()
	defer refresh.Stop()
	for {
		select {
		case <-p.stopLoop:
			return
		case <-gone:
			p.fail(fmt.Errorf("keyorder/subscriber: following the parking control log: %w", p.log.Err()))
			<-p.stopLoop
			return
		case <-p.b.Kick():
		case <-refresh.C:
		}
		p.barrierRound()
		if d, ok := p.b.NextRefresh(time.Now()); ok {
			refresh.Reset(d)
		}
	}
}

// Shutdown ends what parking does for a stopping Receive: releases stop
// before their next message, and flights land. The engine gives it what
// is left of the drain timeout, which the handlers had too; then it
// cancels the handlers and the flights' waits (cancelOps, given to
// Attach), their deliveries nacked.
func (p *Parking) Shutdown() {
	p.rel.close()
	p.flights.Wait()
}

// Stop stops the parking component once the official Receive has
// returned, and returns err, or why the control log could no longer be
// followed. It waits for the server until the shutdown's time is up
// (ShutdownBound).
func (p *Parking) Stop(err error) error {
	close(p.stopLoop)
	p.cancelOps() // a marker on its way is not waited for
	<-p.loopDone
	late := p.door.Deadline()
	if ferr := p.log.Shutdown(late); ferr != nil && err == nil && late.Err() == nil {
		err = fmt.Errorf("keyorder/subscriber: following the parking control log: %w", ferr)
	}
	_ = p.out.Close(late)
	return err
}

package controllog

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"time"
)

// The release-request protocol, on a Log's surface: a program that runs
// no Receive asks for a key's release (Ask) and may wait for its outcome
// (Await) or withdraw it (Withdraw); every Receive watches the pending
// requests and claims those whose park nobody releases (Claimable). The
// claim itself is a Claim event, whose compare-and-set picks one Receive.

// Errors of the protocol, which the subscriber turns into its own.
var (
	// ErrNotParked: the key has no park.
	ErrNotParked = errors.New("controllog: the key is not parked")
	// ErrNoRequest: no request is pending on the key's park.
	ErrNoRequest = errors.New("controllog: no release request is pending")
	// ErrReleasing: a release of the key runs, so its request cannot be
	// withdrawn.
	ErrReleasing = errors.New("controllog: a release of the key runs")
)

// A RequestEnded is how a request ended with its key still parked: a
// released message failed for good again (Msg and Err are its ID and
// error, as the log keeps them), or the request was withdrawn
// (Withdrawn; Msg and Err are then the park's, from before).
type RequestEnded struct {
	Msg, Err  string
	Withdrawn bool
}

func (e *RequestEnded) Error() string {
	if e.Withdrawn {
		return "the request was withdrawn"
	}
	return fmt.Sprintf("at message %s: %s", e.Msg, e.Err)
}

// An Asked is a release request recorded on a park, as the log holds it:
// the request pending there when it was recorded, which one made earlier
// may have been.
type Asked struct {
	Key, ParkID string
	At          time.Time // when the pending request was made; zero if it had ended
	By          string
}

// Ask records a request, by who, for the release of key's park, in l,
// whose state must be caught up, and returns it. A request made while one
// is pending joins it.
func (l *Log) Ask(ctx context.Context, key, who string) (Asked, error) {
	for {
		rec := l.Lookup(key)
		if rec == nil {
			return Asked{}, fmt.Errorf("%w: %q", ErrNotParked, key)
		}
		v, err := l.Record(ctx, Event{Kind: Request, Key: key, ParkID: rec.ParkID, From: who})
		if err != nil {
			return Asked{}, err
		}
		if !v.Applied {
			continue // the park ended meanwhile: ask about the key as it is now
		}
		req := Asked{Key: key, ParkID: rec.ParkID}
		if p := l.Pending(key, req.ParkID); p != nil {
			req.At, req.By = p.Requested, p.Requester
		}
		return req, nil
	}
}

// Unparked returns when key's last park ended, by the service's clock, if
// it ended within the last hour: a release asked for again is told that
// one ran. It scans the parks ended in the last 31 days, for a question
// an operator asks.
func (l *Log) Unparked(key string) (time.Time, bool) {
	l.f.mu.Lock()
	defer l.f.mu.Unlock()
	return l.f.rp.state.unparked(key)
}

// Pending returns the request pending on key's park park, nil if none is.
func (l *Log) Pending(key, park string) *PendingRelease {
	for _, p := range l.PendingReleases() {
		if p.Key == key && p.ParkID == park {
			return &p
		}
	}
	return nil
}

// Await waits until req has ended in l, and returns how: nil once the park
// has ended, a *RequestEnded if the park is still there without the
// request, ctx.Err() if ctx ends first, or why l stopped following the
// log. It watches the pending requests and the view, not the park's
// record, so that a wait costs little per event however many messages
// the park holds.
func (l *Log) Await(ctx context.Context, req Asked) error {
	for {
		changed := l.Changes()
		// The requests first, then the view: a request gone from a park
		// that has not ended failed; the view is no older than the list.
		p := l.Pending(req.Key, req.ParkID)
		switch {
		case l.View().ParkID(req.Key) != req.ParkID:
			return nil // unparked
		case p == nil || !p.Requested.Equal(req.At) || p.Requester != req.By:
			rec := l.Lookup(req.Key)
			if rec == nil || rec.ParkID != req.ParkID {
				return nil
			}
			return &RequestEnded{Msg: rec.Msg, Err: rec.Err, Withdrawn: !req.At.IsZero() && rec.Withdrawn.Equal(req.At)}
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return ctx.Err()
		case <-l.Gone():
			return fmt.Errorf("following the control log: %w", l.Err())
		}
	}
}

// Withdraw records the withdrawal of the request pending on key's park in
// l, whose state must be caught up. A refusal is explained by the state
// the log applied it to, which its verdict is no older than.
func (l *Log) Withdraw(ctx context.Context, key string) error {
	rec := l.Lookup(key)
	if rec == nil {
		return fmt.Errorf("%w: %q", ErrNotParked, key)
	}
	if rec.Requested.IsZero() {
		return fmt.Errorf("%w: %q", ErrNoRequest, key)
	}
	v, err := l.Record(ctx, Event{Kind: Withdraw, Key: key, ParkID: rec.ParkID})
	switch {
	case err != nil:
		return err
	case v.Applied:
		return nil
	}
	switch now := l.Lookup(key); {
	case now == nil || now.ParkID != rec.ParkID:
		return fmt.Errorf("%w: %q (released meanwhile)", ErrNotParked, key)
	case now.Requested.IsZero():
		return fmt.Errorf("%w: %q (it ended meanwhile)", ErrNoRequest, key)
	default:
		return fmt.Errorf("%w: %q: it cannot be withdrawn", ErrReleasing, key)
	}
}

// ClaimFor returns the Claim event that carries out the request pr: the
// log refuses it unless pr is still the request pending on its park.
func ClaimFor(pr PendingRelease) Event {
	return Event{Kind: Claim, Key: pr.Key, ParkID: pr.ParkID, Asked: pr.Requested}
}

// Claimable returns the requests of pending that the Log self may claim
// at now: those whose park has no releaser, is its own, or has one whose
// claim has lapsed by self's clock (lease after its last sign of life),
// and whose key after allows now. It also returns when to look again for
// the others, zero for when the log moves.
func Claimable(pending []PendingRelease, self string, lease time.Duration, now time.Time, after func(key string) time.Time) (claim []PendingRelease, next time.Time) {
	for _, pr := range pending {
		at := after(pr.Key)
		if pr.Owner != "" && pr.Owner != self {
			// Another releaser's claim: it may lapse, if its process died.
			if lapse := pr.Beat.Add(lease); lapse.After(at) {
				at = lapse
			}
		}
		if now.Before(at) {
			if next.IsZero() || at.Before(next) {
				next = at
			}
			continue
		}
		claim = append(claim, pr)
	}
	return claim, next
}

// A PendingRelease is a release request (Request) not carried out yet,
// and the state of its park's release: what a Receive needs to decide
// whether to claim it.
type PendingRelease struct {
	Key, ParkID string
	// Requested is when the request was made, by the service's clock;
	// Requester who made it.
	Requested time.Time
	Requester string
	// Owner is the park's releaser, "" when none; Beat its last claim or
	// progress, by the service's clock.
	Owner string
	Beat  time.Time
}

// PendingReleases returns the release requests not carried out yet,
// oldest first. It costs nothing while there are none.
func (l *Log) PendingReleases() []PendingRelease { return l.f.pendingReleases() }

func (f *follower) pendingReleases() []PendingRelease {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.rp.state.pendingReleases()
}

// pendingReleases returns the requests pending in s, oldest first.
func (s *ctlState) pendingReleases() []PendingRelease {
	if len(s.requested) == 0 {
		return nil
	}
	out := make([]PendingRelease, 0, len(s.requested))
	for key := range s.requested {
		rec := s.keys[key]
		out = append(out, PendingRelease{Key: key, ParkID: rec.ParkID, Requested: rec.Requested, Requester: rec.Requester, Owner: rec.Owner, Beat: rec.Beat})
	}
	slices.SortFunc(out, func(a, b PendingRelease) int {
		if c := a.Requested.Compare(b.Requested); c != 0 {
			return c
		}
		return cmp.Compare(a.Key, b.Key)
	})
	return out
}

// endRequest ends rec's pending request, if it has one.
func (s *ctlState) endRequest(rec *ParkRecord) {
	rec.Requested, rec.Requester = time.Time{}, ""
	delete(s.requested, rec.Key)
}

package controllog

import (
	"cmp"
	"slices"
	"time"
)

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

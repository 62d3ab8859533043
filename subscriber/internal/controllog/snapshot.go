package controllog

import "time"

// A snapshotPart is a slice of the state: some parked keys, whole or a
// run of their IDs, and some ended parks. The parts of a snapshot, merged,
// are the state as of its begin.
type snapshotPart struct {
	Keys  []*ParkRecord `json:"keys,omitempty"`
	Ended []*endedPark  `json:"ended,omitempty"`
}

// snapshotIDs bounds the message IDs of one snapshot part, about 30 bytes
// each, to keep a part well under the service's 10 MB message limit.
const snapshotIDs = 20_000

// snapshotOf splits the state s into parts.
func snapshotOf(s *ctlState) []*snapshotPart {
	var parts []*snapshotPart
	cur, n := &snapshotPart{}, 0
	flush := func() {
		parts = append(parts, cur)
		cur, n = &snapshotPart{}, 0
	}
	add := func(ids int) {
		if n += ids; n >= snapshotIDs {
			flush()
		}
	}
	for _, e := range s.ended {
		cur.Ended = append(cur.Ended, &endedPark{Park: e.Park, At: e.At, IDs: e.IDs, Key: e.Key})
		add(1 + len(e.IDs))
	}
	for _, rec := range s.keys {
		// A long park goes over several parts, a run of its IDs in each.
		ids, released := rec.IDs, rec.Released
		for first := true; first || len(ids) > 0 || len(released) > 0; first = false {
			c := *rec
			take := min(len(ids), snapshotIDs)
			c.IDs, ids = ids[:take], ids[take:]
			take = min(len(released), snapshotIDs-len(c.IDs))
			c.Released, released = released[:take], released[take:]
			cur.Keys = append(cur.Keys, &c)
			add(1 + len(c.IDs) + len(c.Released))
		}
	}
	if n > 0 || len(parts) == 0 {
		flush()
	}
	return parts
}

// fromSnapshot rebuilds a state from a snapshot's parts.
func fromSnapshot(parts []*snapshotPart, lease time.Duration) *ctlState {
	s := newCtlState(lease)
	for _, p := range parts {
		for _, e := range p.Ended {
			s.ended[e.Park] = e
			for _, id := range e.IDs {
				s.released[id] = e.Park
			}
		}
		for _, rec := range p.Keys {
			if have := s.keys[rec.Key]; have != nil && have.ParkID == rec.ParkID {
				have.IDs = append(have.IDs, rec.IDs...)
				have.Released = append(have.Released, rec.Released...)
				continue
			}
			c := *rec
			s.keys[rec.Key] = &c
		}
	}
	for _, rec := range s.keys {
		rec.index()
		if !rec.Requested.IsZero() {
			s.requested[rec.Key] = true
		}
	}
	return s
}

// A logReplay applies the control log from some point on. It starts from an
// empty state, which is whole only if the log holds every event since the
// first; otherwise it becomes whole at the first snapshot whose begin it
// saw: the state is then the snapshot's, with the events between its begin
// and its last part applied again on top.
type logReplay struct {
	state *ctlState
	// whole is set once a snapshot has been applied; until then the state
	// may lack what the log held before the replay's start.
	whole bool
	// pending holds, for each snapshot begun since the replay started and
	// not yet applied, its parts so far and the events that followed its
	// begin.
	pending map[string]*pendingSnapshot
	// lastSnapshot is the publish time of the newest whole snapshot seen.
	lastSnapshot time.Time
}

type pendingSnapshot struct {
	parts []*snapshotPart
	after []pendingEvent
}

type pendingEvent struct {
	ev *event
	at time.Time
}

func newLogReplay(lease time.Duration) *logReplay {
	return &logReplay{state: newCtlState(lease), pending: map[string]*pendingSnapshot{}}
}

// apply applies ev, published at at, and returns its verdict.
func (rp *logReplay) apply(ev *event, at time.Time) Verdict {
	switch ev.Kind {
	case evSnapshotBegin:
		if !rp.whole {
			rp.pending[ev.Nonce] = &pendingSnapshot{}
		}
		return Verdict{Applied: true}
	case evSnapshot:
		ps := rp.pending[ev.Nonce]
		if ps == nil || ev.Part == nil {
			if ev.Last && rp.whole {
				rp.lastSnapshot = at
			}
			return Verdict{Applied: true}
		}
		ps.parts = append(ps.parts, ev.Part)
		if ev.Last {
			rp.state = fromSnapshot(ps.parts, rp.state.lease)
			for _, pe := range ps.after {
				rp.state.apply(pe.ev, pe.at)
			}
			rp.whole, rp.pending, rp.lastSnapshot = true, nil, at
		}
		return Verdict{Applied: true}
	}
	for _, ps := range rp.pending {
		ps.after = append(ps.after, pendingEvent{ev, at})
	}
	return rp.state.apply(ev, at)
}

package controllog

import (
	"cmp"
	"slices"
	"time"
)

// A Verdict is what applying an event did, and the state of its key
// after: the same on every process that applied the same log.
type Verdict struct {
	// Applied is set when the event did what its kind says; a refused
	// event changed nothing.
	Applied bool
	// ParkID is the key's park now; "" when it is not parked.
	ParkID string
	// Ended is set when the event's park has ended (unparked).
	Ended bool
}

// The lifetimes of what the state remembers.
const (
	// releasedKeep is how long the IDs of an ended park's messages are
	// remembered, so that a copy of one the service delivers again on the
	// subscription (after a lost ack) is acked without running.
	releasedKeep = time.Hour
	// endedKeep is how long an ended park is remembered, so that its
	// events, late, are refused: the service's longest message retention,
	// 31 days, after which none of them can be read.
	endedKeep = 31 * 24 * time.Hour
)

// A ParkRecord is a parked key, as the log has it. Its JSON encoding is
// part of a snapshot's, so of the log's wire format.
type ParkRecord struct {
	Key    string    `json:"key"`
	ParkID string    `json:"park"`
	Since  time.Time `json:"since"` // the park event's publish time
	Msg    string    `json:"msg"`   // the message whose failure parked the key, or failed again
	Err    string    `json:"err"`   // its last error
	// IDs are the parked messages, in the order they were parked.
	IDs []string `json:"ids"`
	// Released are those a release has run.
	Released []string `json:"released,omitempty"`
	// Owner is the releaser, "" when none; Beat its last claim or
	// progress.
	Owner string    `json:"owner,omitempty"`
	Beat  time.Time `json:"beat,omitzero"`
	// Requested is when the pending release request was made (the
	// Request event's publish time), zero when none; Requester who made
	// it. Added with Request: a snapshot an older process writes drops
	// them.
	Requested time.Time `json:"requested,omitzero"`
	Requester string    `json:"requester,omitempty"`
	// Withdrawn is the time of the last request withdrawn from the park
	// (Withdraw), so that whoever waits on it learns it was withdrawn,
	// not failed. Added after Withdraw: older snapshots lack it.
	Withdrawn time.Time `json:"withdrawn,omitzero"`

	ids      map[string]bool // the set of IDs
	released map[string]bool // the set of Released
}

// Remaining counts the parked messages not released yet.
func (p *ParkRecord) Remaining() int { return len(p.IDs) - len(p.Released) }

// IsReleased reports whether a release has run the parked message id.
func (p *ParkRecord) IsReleased(id string) bool { return p.released[id] }

func (p *ParkRecord) index() {
	p.ids = make(map[string]bool, len(p.IDs))
	for _, id := range p.IDs {
		p.ids[id] = true
	}
	p.released = make(map[string]bool, len(p.Released))
	for _, id := range p.Released {
		p.released[id] = true
	}
}

// A Summary is what List tells of a parked key: the fields of
// subscriber.ParkedKey, which is converted from it.
type Summary struct {
	Key string
	// Since is when the key was parked, by the service's clock.
	Since time.Time
	// Messages counts the key's messages parked and not released yet.
	Messages int
	// MessageID is the message whose failure parked the key, or that
	// failed again in a release, and LastError its last error.
	MessageID string
	LastError string
	// Releasing is set while a release of the key runs, on any process.
	Releasing bool
	// ReleaseRequested is when a pending release request was made, zero
	// when none; ReleaseRequestedBy who made it.
	ReleaseRequested   time.Time
	ReleaseRequestedBy string
}

// An ended park: when, and the messages it released while they may still
// come back on the subscription.
type endedPark struct {
	Park string    `json:"park"`
	At   time.Time `json:"at"`
	IDs  []string  `json:"ids,omitempty"`
	// Key is the park's key, kept with its IDs (releasedKeep), so that a
	// release asked for again is told it happened (Unparked). Added after
	// the rest: an older snapshot lacks it.
	Key string `json:"key,omitempty"`
}

// ctlState is the parking state the control log describes. It is not safe
// for concurrent use: the follower guards it.
type ctlState struct {
	lease time.Duration          // Config.Lease, a rule of the log
	keys  map[string]*ParkRecord // parked keys
	ended map[string]*endedPark  // ended parks, by ID, for endedKeep
	// released maps the messages of recently ended parks to their park.
	released map[string]string
	// requested holds the parked keys with a pending release request.
	requested map[string]bool
}

func newCtlState(lease time.Duration) *ctlState {
	return &ctlState{lease: lease, keys: map[string]*ParkRecord{}, ended: map[string]*endedPark{}, released: map[string]string{},
		requested: map[string]bool{}}
}

// apply applies ev, published at at, and returns its verdict.
func (s *ctlState) apply(ev *event, at time.Time) Verdict {
	s.prune(at)
	rec := s.keys[ev.Key]
	matches := rec != nil && rec.ParkID == ev.Park
	ok := false
	switch ev.Kind {
	case Park:
		if rec == nil && s.ended[ev.Park] == nil && ev.Key != "" && ev.Park != "" {
			rec = &ParkRecord{Key: ev.Key, ParkID: ev.Park, Since: at, Msg: ev.Msg, Err: ev.Err}
			rec.index()
			s.keys[ev.Key] = rec
			ok = true
		}
	case Forward:
		if ok = matches; ok {
			for _, id := range ev.IDs {
				if !rec.ids[id] {
					rec.ids[id] = true
					rec.IDs = append(rec.IDs, id)
				}
			}
		}
	case Claim:
		// A request's claim holds only while the request does.
		forRequest := ev.Asked.IsZero() || (rec != nil && rec.Requested.Equal(ev.Asked))
		if ok = matches && forRequest && (rec.Owner == "" || rec.Owner == ev.By || at.Sub(rec.Beat) > s.lease); ok {
			rec.Owner, rec.Beat = ev.By, at
		}
	case Progress:
		// What ran, ran: recorded whoever the releaser is now.
		if ok = matches; ok {
			for _, id := range ev.IDs {
				if rec.ids[id] && !rec.released[id] {
					rec.released[id] = true
					rec.Released = append(rec.Released, id)
				}
			}
			if rec.Owner == ev.By {
				rec.Beat = at
			}
		}
	case Stop:
		if ok = matches && rec.Owner == ev.By; ok {
			rec.Owner, rec.Beat = "", time.Time{}
			if ev.Err != "" {
				rec.Msg, rec.Err = ev.Msg, ev.Err
				s.endRequest(rec) // it failed: the asker learns so
			}
		}
	case Unpark:
		if ok = matches && rec.Owner == ev.By && len(rec.IDs) == ev.N && rec.Remaining() == 0; ok {
			s.endRequest(rec)
			delete(s.keys, ev.Key)
			e := &endedPark{Park: rec.ParkID, At: at, IDs: rec.Released}
			if len(e.IDs) > 0 {
				e.Key = rec.Key // kept with the IDs
			}
			s.ended[rec.ParkID] = e
			for _, id := range rec.Released {
				s.released[id] = rec.ParkID
			}
			rec = nil
		}
	case Request:
		if ok = matches; ok && rec.Requested.IsZero() {
			rec.Requested, rec.Requester = at, cmp.Or(ev.From, ev.By)
			s.requested[rec.Key] = true
		}
	case Withdraw:
		if ok = matches && !rec.Requested.IsZero() && (rec.Owner == "" || at.Sub(rec.Beat) > s.lease); ok {
			rec.Withdrawn = rec.Requested
			s.endRequest(rec)
		}
	case evMarker:
		ok = true
	}
	v := Verdict{Applied: ok, Ended: s.ended[ev.Park] != nil}
	if rec = s.keys[ev.Key]; rec != nil {
		v.ParkID = rec.ParkID
	}
	return v
}

// prune forgets ended parks older than endedKeep, and their messages once
// older than releasedKeep.
func (s *ctlState) prune(now time.Time) {
	for id, e := range s.ended {
		if e.IDs != nil && now.Sub(e.At) > releasedKeep {
			for _, m := range e.IDs {
				if s.released[m] == id {
					delete(s.released, m)
				}
			}
			e.IDs, e.Key = nil, ""
		}
		if now.Sub(e.At) > endedKeep {
			delete(s.ended, id)
		}
	}
}

// list returns the parked keys, oldest first.
func (s *ctlState) list() []Summary {
	out := make([]Summary, 0, len(s.keys))
	for _, rec := range s.keys {
		out = append(out, Summary{
			Key: rec.Key, Since: rec.Since, Messages: rec.Remaining(),
			MessageID: rec.Msg, LastError: rec.Err, Releasing: rec.Owner != "",
			ReleaseRequested: rec.Requested, ReleaseRequestedBy: rec.Requester,
		})
	}
	slices.SortFunc(out, func(a, b Summary) int {
		if c := a.Since.Compare(b.Since); c != 0 {
			return c
		}
		return cmp.Compare(a.Key, b.Key)
	})
	return out
}

// unparked returns when key's last park ended, if within releasedKeep.
func (s *ctlState) unparked(key string) (at time.Time, ok bool) {
	for _, e := range s.ended {
		if e.Key == key && e.IDs != nil && e.At.After(at) {
			at, ok = e.At, true
		}
	}
	return at, ok
}

// record returns a copy of key's park, nil if it is not parked.
func (s *ctlState) record(key string) *ParkRecord {
	rec := s.keys[key]
	if rec == nil {
		return nil
	}
	c := *rec
	c.IDs = slices.Clone(rec.IDs)
	c.Released = slices.Clone(rec.Released)
	c.index()
	return &c
}

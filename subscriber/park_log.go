package subscriber

import (
	"cmp"
	"encoding/json"
	"slices"
	"time"
)

// The control log is the parking state of a subscription, kept in Pub/Sub
// itself: the events of every process that receives the subscription, on
// one control topic, all with one ordering key, so that the service gives
// them one total order. Every process replays the log when its Receive
// starts and follows it while it runs, applying each event in that order
// to a ctlState. The state is a function of the log: processes that have
// applied the same events agree on it, and each event's verdict (applied
// or refused) is the same everywhere. Writers learn the verdict of their
// own events when they come back.
//
// Events that read the state before they change it (a park when the key is
// free, an unpark when every parked message has run) are therefore
// compare-and-set operations on the log: two processes that race get one
// winner, decided by the order the service gives.

// eventKind says what an event does.
type eventKind string

const (
	// evPark parks Key under the new park ID Park, because message Msg
	// failed for good with Err. Refused if the key is parked already: the
	// verdict then names the park in force.
	evPark eventKind = "park"
	// evForward records that IDs, copied to the parking topic, belong to
	// park Park of Key. Refused unless Key is parked under Park.
	evForward eventKind = "forward"
	// evClaim makes By the releaser of Key, or renews its claim (a
	// heartbeat). Refused while another releaser's claim is fresher than
	// the release lease.
	evClaim eventKind = "claim"
	// evProgress records that IDs of Key's park ran successfully in a
	// release.
	evProgress eventKind = "progress"
	// evStop ends By's release of Key, the key staying parked; with Err, a
	// released message, Msg, failed for good again.
	evStop eventKind = "stop"
	// evUnpark ends Key's park: its releaser ran every one of the N parked
	// messages. Refused if more were parked meanwhile.
	evUnpark eventKind = "unpark"
	// evMarker changes nothing: a process that sees its own marker come
	// back has applied every event published before the marker was (the
	// barrier, park_barrier.go).
	evMarker eventKind = "marker"
	// evSnapshotBegin marks the point of the log a snapshot describes.
	evSnapshotBegin eventKind = "snapshot-begin"
	// evSnapshot is a part of a snapshot: the state as of its begin.
	evSnapshot eventKind = "snapshot"
)

// An event is one entry of the control log, JSON-encoded in a message's
// data.
type event struct {
	Kind eventKind `json:"kind"`
	By   string    `json:"by,omitempty"`  // the Receive that wrote it
	Seq  uint64    `json:"seq,omitempty"` // By's count of its events: its waiters find the verdict by it
	Key  string    `json:"key,omitempty"`
	Park string    `json:"park,omitempty"` // the park ID
	IDs  []string  `json:"ids,omitempty"`  // message IDs (forward, progress)
	Msg  string    `json:"msg,omitempty"`  // the failed message (park, stop)
	Err  string    `json:"err,omitempty"`  // its error
	N    int       `json:"n,omitempty"`    // unpark: the parked messages released
	// Nonce ties a snapshot's parts to its begin.
	Nonce string `json:"nonce,omitempty"`
	// Part is a snapshot part's content, and Last marks its final part.
	Part *snapshotPart `json:"part,omitempty"`
	Last bool          `json:"last,omitempty"`
}

// A verdict is what applying an event did, and the state of its key after.
type verdict struct {
	applied bool
	park    string // the key's park ID now; "" when it is not parked
	done    bool   // the event's park has ended (unparked)
	owner   string // the key's releaser now
}

// The lifetimes of what the state remembers.
const (
	// releaseLeaseDefault is how long a releaser's claim holds without a
	// heartbeat; another process may take the release over after it.
	releaseLeaseDefault = 30 * time.Second
	// releasedKeep is how long the IDs of an ended park's messages are
	// remembered, so that a copy of one the service delivers again on the
	// subscription (after a lost ack) is acked without running.
	releasedKeep = time.Hour
)

// releaseLease is releaseLeaseDefault; tests shorten it.
var releaseLease = releaseLeaseDefault

// A parkRecord is a parked key.
type parkRecord struct {
	Key   string    `json:"key"`
	Park  string    `json:"park"`
	Since time.Time `json:"since"` // the park event's publish time
	Msg   string    `json:"msg"`   // the message whose failure parked the key, or failed again
	Err   string    `json:"err"`   // its last error
	// IDs are the parked messages, in the order they were parked.
	IDs []string `json:"ids"`
	// Released are those a release has run.
	Released []string `json:"released,omitempty"`
	// Owner is the releaser, "" when none; Beat its last claim or
	// progress.
	Owner string    `json:"owner,omitempty"`
	Beat  time.Time `json:"beat,omitzero"`

	ids      map[string]bool // the set of IDs
	released map[string]bool // the set of Released
}

// remaining counts the parked messages not released yet.
func (p *parkRecord) remaining() int { return len(p.IDs) - len(p.Released) }

func (p *parkRecord) index() {
	p.ids = make(map[string]bool, len(p.IDs))
	for _, id := range p.IDs {
		p.ids[id] = true
	}
	p.released = make(map[string]bool, len(p.Released))
	for _, id := range p.Released {
		p.released[id] = true
	}
}

// An ended park: when, and the messages it released while they may still
// come back on the subscription.
type endedPark struct {
	Park string    `json:"park"`
	At   time.Time `json:"at"`
	IDs  []string  `json:"ids,omitempty"`
}

// ctlState is the parking state the control log describes. It is not safe
// for concurrent use: the follower guards it.
type ctlState struct {
	keys  map[string]*parkRecord // parked keys
	ended map[string]*endedPark  // ended parks, by ID, for controlRetention
	// released maps the messages of recently ended parks to their park.
	released map[string]string
}

func newCtlState() *ctlState {
	return &ctlState{keys: map[string]*parkRecord{}, ended: map[string]*endedPark{}, released: map[string]string{}}
}

// apply applies ev, published at at, and returns its verdict.
func (s *ctlState) apply(ev *event, at time.Time) verdict {
	s.prune(at)
	rec := s.keys[ev.Key]
	matches := rec != nil && rec.Park == ev.Park
	ok := false
	switch ev.Kind {
	case evPark:
		if rec == nil && s.ended[ev.Park] == nil && ev.Key != "" && ev.Park != "" {
			rec = &parkRecord{Key: ev.Key, Park: ev.Park, Since: at, Msg: ev.Msg, Err: ev.Err}
			rec.index()
			s.keys[ev.Key] = rec
			ok = true
		}
	case evForward:
		if ok = matches; ok {
			for _, id := range ev.IDs {
				if !rec.ids[id] {
					rec.ids[id] = true
					rec.IDs = append(rec.IDs, id)
				}
			}
		}
	case evClaim:
		if ok = matches && (rec.Owner == "" || rec.Owner == ev.By || at.Sub(rec.Beat) > releaseLease); ok {
			rec.Owner, rec.Beat = ev.By, at
		}
	case evProgress:
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
	case evStop:
		if ok = matches && rec.Owner == ev.By; ok {
			rec.Owner, rec.Beat = "", time.Time{}
			if ev.Err != "" {
				rec.Msg, rec.Err = ev.Msg, ev.Err
			}
		}
	case evUnpark:
		if ok = matches && rec.Owner == ev.By && len(rec.IDs) == ev.N && rec.remaining() == 0; ok {
			delete(s.keys, ev.Key)
			s.ended[rec.Park] = &endedPark{Park: rec.Park, At: at, IDs: rec.Released}
			for _, id := range rec.Released {
				s.released[id] = rec.Park
			}
			rec = nil
		}
	case evMarker:
		ok = true
	}
	v := verdict{applied: ok, done: s.ended[ev.Park] != nil}
	if rec = s.keys[ev.Key]; rec != nil {
		v.park, v.owner = rec.Park, rec.Owner
	}
	return v
}

// prune forgets ended parks older than controlRetention, and their
// messages once older than releasedKeep.
func (s *ctlState) prune(now time.Time) {
	for id, e := range s.ended {
		if e.IDs != nil && now.Sub(e.At) > releasedKeep {
			for _, m := range e.IDs {
				if s.released[m] == id {
					delete(s.released, m)
				}
			}
			e.IDs = nil
		}
		if now.Sub(e.At) > controlRetention {
			delete(s.ended, id)
		}
	}
}

// changesView reports whether applying an event of kind k may change which
// keys are parked or which messages were released: what the view holds.
func (k eventKind) changesView() bool {
	return k == evPark || k == evUnpark || k == evSnapshot
}

// list returns the parked keys, oldest first.
func (s *ctlState) list() []ParkedKey {
	out := make([]ParkedKey, 0, len(s.keys))
	for _, rec := range s.keys {
		out = append(out, ParkedKey{
			Key: rec.Key, Since: rec.Since, Messages: rec.remaining(),
			MessageID: rec.Msg, LastError: rec.Err, Releasing: rec.Owner != "",
		})
	}
	slices.SortFunc(out, func(a, b ParkedKey) int {
		if c := a.Since.Compare(b.Since); c != 0 {
			return c
		}
		return cmp.Compare(a.Key, b.Key)
	})
	return out
}

// record returns a copy of key's park, nil if it is not parked.
func (s *ctlState) record(key string) *parkRecord {
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

// A snapshotPart is a slice of the state: some parked keys, whole or a
// run of their IDs, and some ended parks. The parts of a snapshot, merged,
// are the state as of its begin.
type snapshotPart struct {
	Keys  []*parkRecord `json:"keys,omitempty"`
	Ended []*endedPark  `json:"ended,omitempty"`
}

// snapshotIDs bounds the message IDs of one snapshot part, about 30 bytes
// each, to keep a part well under the service's 10 MB message limit.
const snapshotIDs = 20_000

// snapshot splits the state into parts.
func (s *ctlState) snapshot() []*snapshotPart {
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
		cur.Ended = append(cur.Ended, &endedPark{Park: e.Park, At: e.At, IDs: e.IDs})
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
func fromSnapshot(parts []*snapshotPart) *ctlState {
	s := newCtlState()
	for _, p := range parts {
		for _, e := range p.Ended {
			s.ended[e.Park] = e
			for _, id := range e.IDs {
				s.released[id] = e.Park
			}
		}
		for _, rec := range p.Keys {
			if have := s.keys[rec.Key]; have != nil && have.Park == rec.Park {
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

func newLogReplay() *logReplay {
	return &logReplay{state: newCtlState(), pending: map[string]*pendingSnapshot{}}
}

// apply applies ev, published at at, and returns its verdict.
func (rp *logReplay) apply(ev *event, at time.Time) verdict {
	switch ev.Kind {
	case evSnapshotBegin:
		if !rp.whole {
			rp.pending[ev.Nonce] = &pendingSnapshot{}
		}
		return verdict{applied: true}
	case evSnapshot:
		ps := rp.pending[ev.Nonce]
		if ps == nil || ev.Part == nil {
			if ev.Last && rp.whole {
				rp.lastSnapshot = at
			}
			return verdict{applied: true}
		}
		ps.parts = append(ps.parts, ev.Part)
		if ev.Last {
			rp.state = fromSnapshot(ps.parts)
			for _, pe := range ps.after {
				rp.state.apply(pe.ev, pe.at)
			}
			rp.whole, rp.pending, rp.lastSnapshot = true, nil, at
		}
		return verdict{applied: true}
	}
	for _, ps := range rp.pending {
		ps.after = append(ps.after, pendingEvent{ev, at})
	}
	return rp.state.apply(ev, at)
}

func encodeEvent(ev *event) ([]byte, error) { return json.Marshal(ev) }

func decodeEvent(data []byte) (*event, error) {
	ev := &event{}
	return ev, json.Unmarshal(data, ev)
}

package controllog

import (
	"encoding/json"
	"time"

	"github.com/keyorder/keyorder/subscriber/internal/ephemeral"
)

// A Kind says what an event does. A new kind takes a constant here and
// its rule in ctlState.apply; one that changes what a View holds also
// takes a case in changesView.
type Kind string

// The kinds of event a writer records. Each uses the fields of Event its
// doc names; its verdict follows the rule given, the same on every
// process.
const (
	// Park parks Key under a new park ID, because message Msg failed for
	// good with Err. Refused if the key is parked already: the verdict
	// then names the park in force.
	Park Kind = "park"
	// Forward records that IDs, copied to the parking topic, belong to
	// park ParkID of Key. Refused unless Key is parked under ParkID.
	Forward Kind = "forward"
	// Claim makes the writer the releaser of Key's park ParkID, or renews
	// its claim (a heartbeat). Refused while another releaser's claim is
	// fresher than the lease (Config.Lease). A claim that carries out a
	// Request names it (Asked, the request's time): it is refused unless
	// that request is the one pending, so that a request withdrawn, or
	// ended, before the claim lands starts no release.
	Claim Kind = "claim"
	// Progress records that IDs of Key's park ParkID ran successfully in
	// a release, whoever the releaser is now.
	Progress Kind = "progress"
	// Stop ends the writer's release of Key, the key staying parked; with
	// Err, a released message, Msg, failed for good again, which also
	// ends a pending Request.
	Stop Kind = "stop"
	// Unpark ends Key's park ParkID: its releaser, the writer, ran every
	// one of the N parked messages. Refused if more were parked meanwhile.
	Unpark Kind = "unpark"
	// Request asks for a release of Key's park ParkID, for a Receive of
	// the subscription, on any process, to carry out; From says who asks,
	// for a person to read. The request stays on the park until it ends
	// (Unpark) or a released message fails for good again (Stop with
	// Err); a release that stops without an error leaves it. A request
	// while one is pending joins it, which keeps its time and asker.
	// Refused unless Key is parked under ParkID. Processes of versions
	// before this kind refuse it, as any kind they do not know, and
	// change nothing.
	Request Kind = "release-request"
	// Withdraw ends the pending Request on Key's park ParkID, the key
	// staying parked. Refused unless Key is parked under ParkID with a
	// request pending and no releaser's claim fresher than the lease: a
	// release that runs is stopped by its Receive, not by the log.
	// Processes of versions before this kind refuse it, and so still see
	// the request pending.
	Withdraw Kind = "release-withdraw"
)

// The log's own kinds, which writers do not record.
const (
	// evMarker changes nothing: a Log that sees its own marker come back
	// has applied every event published before the marker was (Sync).
	evMarker Kind = "marker"
	// evSnapshotBegin marks the point of the log a snapshot describes.
	evSnapshotBegin Kind = "snapshot-begin"
	// evSnapshot is a part of a snapshot: the state as of its begin.
	evSnapshot Kind = "snapshot"
)

// changesView reports whether applying an event of kind k may change which
// keys are parked or which messages were released: what a View holds.
func (k Kind) changesView() bool {
	return k == Park || k == Unpark || k == evSnapshot
}

// An Event is what a writer records in the log: its Kind, and the fields
// the kind names.
type Event struct {
	Kind Kind
	Key  string
	// ParkID is the park the event is about. A Park event left without
	// one gets a new one.
	ParkID string
	IDs    []string // message IDs (Forward, Progress)
	Msg    string   // the failed message (Park, Stop)
	Err    string   // its error
	N      int      // Unpark: the parked messages released
	From   string   // Request: who asks, for a person to read
	// Asked is, on a Claim that carries out a Request, the request's
	// time (PendingRelease.Requested); zero on a Release's own claim.
	Asked time.Time
}

// entry is ev as the log holds it, without its writer, which publish sets.
func (ev Event) entry() *event {
	if ev.Kind == Park && ev.ParkID == "" {
		ev.ParkID = ephemeral.NewID()
	}
	return &event{Kind: ev.Kind, Key: ev.Key, Park: ev.ParkID, IDs: ev.IDs, Msg: ev.Msg, Err: ev.Err, N: ev.N, From: ev.From, Asked: ev.Asked}
}

// An event is one entry of the control log, JSON-encoded in a message's
// data. Its encoding is the log's wire format, which the processes of
// every version that receive a subscription share: a field's name and
// meaning never change.
type event struct {
	Kind Kind   `json:"kind"`
	By   string `json:"by,omitempty"`  // the Log that wrote it
	Seq  uint64 `json:"seq,omitempty"` // By's count of its events: its waiters find the verdict by it
	Key  string `json:"key,omitempty"`
	Park string `json:"park,omitempty"` // the park ID
	// IDs, Msg, Err and N are Event's.
	IDs []string `json:"ids,omitempty"`
	Msg string   `json:"msg,omitempty"`
	Err string   `json:"err,omitempty"`
	N   int      `json:"n,omitempty"`
	// From is Event's, added with Request: older processes ignore it.
	From string `json:"from,omitempty"`
	// Asked is Event's, added later: older processes ignore it, and so
	// apply a request's claim as a plain one.
	Asked time.Time `json:"asked,omitzero"`
	// Nonce ties a snapshot's parts to its begin.
	Nonce string `json:"nonce,omitempty"`
	// Part is a snapshot part's content, and Last marks its final part.
	Part *snapshotPart `json:"part,omitempty"`
	Last bool          `json:"last,omitempty"`
}

func encodeEvent(ev *event) ([]byte, error) { return json.Marshal(ev) }

func decodeEvent(data []byte) (*event, error) {
	ev := &event{}
	return ev, json.Unmarshal(data, ev)
}

// Attributes of the control log's messages, for the followers' filter.
const (
	attrState = "keyorder-state" // "1" on every event that makes the state
	attrTo    = "keyorder-to"    // on a marker: the Log that wants it back
)

// controlKey is the ordering key every control event shares, so that the
// service gives them one order.
const controlKey = "keyorder-control"

// Package statuspage serves a live status page for a running
// subscription, as net/http/pprof serves profiles: its throughput, its
// busiest partitions, its held keys and its hot keys, from
// [subscriber.Subscription.Stats].
//
//	mux.Handle("/debug/keyorder/", http.StripPrefix("/debug/keyorder", statuspage.Handler(sub)))
//
// The page is plain HTML that polls its own URL with ?format=json every
// second and updates itself; the JSON is a [Status]. It needs no external
// asset, so it works offline. Keys appear on it: serve it where you would
// serve pprof, not to the public. Every answer forbids framing
// (X-Frame-Options, CSP frame-ancestors) and sniffing (nosniff), and a
// request for a host name that is not the page's own is refused with 421
// (see [WithHosts]), so that a web page the operator visits cannot read
// the JSON by DNS rebinding.
package statuspage

import (
	_ "embed"
	"encoding/json"
	"fmt"
	"html/template"
	"net/http"
	"time"

	"github.com/keyorder/keyorder/subscriber"
)

// Handler returns the status page of sub. A GET or HEAD serves the HTML
// page, or, with ?format=json, a [Status]; other methods get 405. Each
// request takes one [subscriber.Subscription.Stats], which is cheap enough
// for every viewer to poll every second. Handler panics if sub is nil, as
// net/http's constructors do with a nil handler: a mistake of the program,
// caught when the page is mounted rather than on its first request.
//
// A request whose Host is not an IP literal, "localhost", or a name given
// by [WithHosts] gets 421 Misdirected Request, whatever its method.
func Handler(sub *subscriber.Subscription, opts ...Option) http.Handler {
	if sub == nil {
		panic("statuspage: Handler called with a nil *subscriber.Subscription")
	}
	h := &hosts{names: map[string]bool{}}
	for _, o := range opts {
		o(h)
	}
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		// The page is not to be framed by another site, which could
		// dress it up to have it clicked, nor read as anything but its
		// own type.
		w.Header().Set("X-Frame-Options", "DENY")
		w.Header().Set("Content-Security-Policy", "frame-ancestors 'none'")
		w.Header().Set("X-Content-Type-Options", "nosniff")
		if !h.allows(req.Host) {
			refuse(w)
			return
		}
		if req.Method != http.MethodGet && req.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
			return
		}
		st := newStatus(sub)
		w.Header().Set("Cache-Control", "no-store")
		if req.URL.Query().Get("format") == "json" {
			w.Header().Set("Content-Type", "application/json")
			_ = json.NewEncoder(w).Encode(st)
			return
		}
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		if err := page.Execute(w, newPageData(st)); err != nil {
			// The response has begun: nothing better to do than cut it.
			panic(http.ErrAbortHandler)
		}
	})
}

// Status is the JSON of the page: a [subscriber.Stats] with durations in
// seconds and errors as text. Counts, and what the Receive holds now, are
// this process's own; Parked is the subscription's, from its control log.
type Status struct {
	Subscription string    `json:"subscription"`
	At           time.Time `json:"at"`
	Receiving    bool      `json:"receiving"`
	Workers      int       `json:"workers"`
	Running      int       `json:"running"`
	Queued       int       `json:"queued"`
	Keys         int       `json:"keys"`
	// OldestAge is the age, in seconds, of the oldest delivery held here.
	OldestAge        float64     `json:"oldest_age"`
	Counts           Counts      `json:"counts"`
	ActivePartitions int         `json:"active_partitions"`
	Partitions       []Partition `json:"partitions"`
	Held             []Held      `json:"held"`
	Parked           []Parked    `json:"parked"`
	TopBacklog       []Key       `json:"top_backlog"`
	TopAge           []Key       `json:"top_age"`
}

// Counts are the cumulative counts of [subscriber.Stats]; the page's
// throughput is their rate between two polls.
type Counts struct {
	Received       int64 `json:"received"`
	Acked          int64 `json:"acked"`
	Deduplicated   int64 `json:"deduplicated"`
	Retried        int64 `json:"retried"`
	Failed         int64 `json:"failed"`
	DeadLettered   int64 `json:"dead_lettered"`
	NackedHeld     int64 `json:"nacked_held"`
	NackedTail     int64 `json:"nacked_tail"`
	NackedRoom     int64 `json:"nacked_room"`
	NackedShutdown int64 `json:"nacked_shutdown"`
	Parked         int64 `json:"parked"`
	Released       int64 `json:"released"`
	AckFailed      int64 `json:"ack_failed"`
	// Duplicates, Gaps and UncertainGaps are the sequence check's (S12):
	// copies skipped by their stamp, and runs of numbers missing, certain
	// or not.
	Duplicates    int64 `json:"duplicates"`
	Gaps          int64 `json:"gaps"`
	UncertainGaps int64 `json:"uncertain_gaps"`
}

// A Partition is a [subscriber.PartitionStats], times in seconds.
type Partition struct {
	Partition  int     `json:"partition"`
	Keys       int     `json:"keys"`
	Queued     int     `json:"queued"`
	Running    bool    `json:"running"`
	RunningFor float64 `json:"running_for"`
	Busy       float64 `json:"busy"`
}

// A Key is a [subscriber.KeyStats], times in seconds.
type Key struct {
	Key        string  `json:"key"`
	Partition  int     `json:"partition"`
	Queued     int     `json:"queued"`
	Running    bool    `json:"running"`
	RunningFor float64 `json:"running_for"`
	Age        float64 `json:"age"`
	Calls      int     `json:"calls"`
	Busy       float64 `json:"busy"`
	Held       bool    `json:"held"`
}

// A Held is a [subscriber.HeldKey]: Since is a time, Age its age in
// seconds; RetryAt is null while the message is away.
type Held struct {
	Key       string     `json:"key"`
	MessageID string     `json:"message_id"`
	Since     time.Time  `json:"since"`
	Age       float64    `json:"age"`
	Attempt   int        `json:"attempt"`
	Error     string     `json:"error"`
	Held      bool       `json:"held"`
	RetryAt   *time.Time `json:"retry_at"`
	Queued    int        `json:"queued"`
}

// A Parked is a [subscriber.ParkedKey] as the running Receive's view of
// the control log has it, which is every process's: Since is a time, Age
// its age in seconds; ReleaseRequested, when a release request is pending
// on it, is when it was made (null otherwise), and ReleaseRequestedBy who
// made it.
type Parked struct {
	Key                string     `json:"key"`
	MessageID          string     `json:"message_id"`
	Since              time.Time  `json:"since"`
	Age                float64    `json:"age"`
	Messages           int        `json:"messages"`
	Error              string     `json:"error"`
	Releasing          bool       `json:"releasing"`
	ReleaseRequested   *time.Time `json:"release_requested"`
	ReleaseRequestedBy string     `json:"release_requested_by"`
}

func newStatus(sub *subscriber.Subscription) Status {
	st := sub.Stats()
	s := Status{
		Subscription: sub.Name(), At: st.At, Receiving: st.Receiving, Workers: st.Workers,
		Running: st.Running, Queued: st.Queued, Keys: st.Keys, OldestAge: st.OldestAge.Seconds(),
		Counts: Counts{
			Received: st.Received, Acked: st.Acked, Deduplicated: st.Deduplicated, Retried: st.Retried,
			Failed: st.Failed, DeadLettered: st.DeadLettered, NackedHeld: st.NackedHeld,
			NackedTail: st.NackedTail, NackedRoom: st.NackedRoom, NackedShutdown: st.NackedShutdown,
			Parked: st.Parked, Released: st.Released, AckFailed: st.AckFailed,
			Duplicates: st.Duplicates, Gaps: st.Gaps, UncertainGaps: st.UncertainGaps,
		},
		ActivePartitions: st.ActivePartitions,
		// Empty lists rather than null, for the page's script.
		Partitions: []Partition{}, Held: []Held{}, Parked: []Parked{}, TopBacklog: keys(st.TopBacklog), TopAge: keys(st.TopAge),
	}
	for _, p := range st.Partitions {
		s.Partitions = append(s.Partitions, Partition{
			Partition: p.Partition, Keys: p.Keys, Queued: p.Queued, Running: p.Running,
			RunningFor: p.RunningFor.Seconds(), Busy: p.Busy.Seconds(),
		})
	}
	for _, h := range st.Held {
		k := Held{
			Key: h.Key, MessageID: h.MessageID, Since: h.Since, Age: st.At.Sub(h.Since).Seconds(),
			Attempt: h.Attempt, Held: h.Held, Queued: h.Queued,
		}
		if h.Err != nil {
			k.Error = h.Err.Error()
		}
		if !h.RetryAt.IsZero() {
			k.RetryAt = &h.RetryAt
		}
		s.Held = append(s.Held, k)
	}
	for _, p := range st.ParkedKeys {
		k := Parked{
			Key: p.Key, MessageID: p.MessageID, Since: p.Since, Age: st.At.Sub(p.Since).Seconds(),
			Messages: p.Messages, Error: p.LastError, Releasing: p.Releasing,
		}
		if !p.ReleaseRequested.IsZero() {
			k.ReleaseRequested, k.ReleaseRequestedBy = &p.ReleaseRequested, p.ReleaseRequestedBy
		}
		s.Parked = append(s.Parked, k)
	}
	return s
}

func keys(ks []subscriber.KeyStats) []Key {
	out := []Key{}
	for _, k := range ks {
		out = append(out, Key{
			Key: k.Key, Partition: k.Partition, Queued: k.Queued, Running: k.Running,
			RunningFor: k.RunningFor.Seconds(), Age: k.Age.Seconds(), Calls: k.Calls, Busy: k.Busy.Seconds(), Held: k.Held,
		})
	}
	return out
}

// pageData is what the page's template shows: the status, and its two
// rankings of keys, which share a table's layout.
type pageData struct {
	Status
	Rankings []ranking
}

type ranking struct {
	Title, Note, ID string // ID names the table body the script refills
	Keys            []Key
}

func newPageData(st Status) pageData {
	return pageData{Status: st, Rankings: []ranking{
		{"Hot keys by backlog", "deliveries here, queued or running", "backlog", st.TopBacklog},
		{"Hot keys by age", "oldest delivery here first", "aged", st.TopAge},
	}}
}

//go:embed page.html
var pageHTML string

var page = template.Must(template.New("page").Funcs(template.FuncMap{"dur": dur}).Parse(pageHTML))

// dur writes seconds as the page's script does: 850ms, 12.3s, 4m05s,
// 2h07m.
func dur(s float64) string {
	d := time.Duration(s * float64(time.Second))
	switch {
	case d < time.Second:
		return fmt.Sprintf("%dms", d.Milliseconds())
	case d < time.Minute:
		return fmt.Sprintf("%.1fs", s)
	case d < time.Hour:
		return fmt.Sprintf("%dm%02ds", int(d.Minutes()), int(d.Seconds())%60)
	}
	return fmt.Sprintf("%dh%02dm", int(d.Hours()), int(d.Minutes())%60)
}

package main

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/keyorder/keyorder/ordering/orderingtest"
)

// faults holds every fault spec given by flag or by the control endpoint,
// applies each when it is due, and removes what it made when asked or when
// the emulator stops.
//
// Each spec that is not done at once (at, every or for) gets one goroutine,
// owned by faults: close cancels them all and waits for them.
type faults struct {
	srv    *orderingtest.Server
	ctx    context.Context // ends with close: stops every goroutine
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu      sync.Mutex // guards nextID, entries and each entry's fields
	nextID  int
	entries []*entry
}

// An entry is one spec and what it did so far.
type entry struct {
	id      int
	spec    faultSpec
	cancel  context.CancelFunc    // stops its goroutine; nil without one
	made    []*orderingtest.Fault // every fault it made, removed or not
	live    []*orderingtest.Fault // those its lifetime has not removed yet
	applied int                   // applications so far
	result  int                   // the last application's count (redeliver-key, break-streams)
}

// status is an entry as the control endpoint reports it.
type status struct {
	ID      int    `json:"id"`
	Spec    string `json:"spec"`
	Applied int    `json:"applied"` // times the spec took effect
	Hits    int    `json:"hits"`    // firings of the faults it made
	Result  int    `json:"result"`  // messages redelivered or streams broken, last time
}

func newFaults(srv *orderingtest.Server) *faults {
	ctx, cancel := context.WithCancel(context.Background())
	return &faults{srv: srv, ctx: ctx, cancel: cancel}
}

// add registers spec. Unless it starts later it is applied before add
// returns, so the status shows the result at once.
func (fs *faults) add(spec faultSpec) status {
	fs.mu.Lock()
	fs.nextID++
	e := &entry{id: fs.nextID, spec: spec}
	fs.entries = append(fs.entries, e)
	fs.mu.Unlock()

	made := false
	if spec.at == 0 {
		made = fs.apply(e)
	}
	if spec.at > 0 || spec.every > 0 || made && spec.lifetime > 0 {
		ctx, cancel := context.WithCancel(fs.ctx)
		fs.mu.Lock()
		e.cancel = cancel
		fs.mu.Unlock()
		fs.wg.Add(1)
		go func() {
			defer fs.wg.Done()
			fs.run(ctx, e, made)
		}()
	}
	return fs.status(e)
}

// apply applies e's spec once and reports whether it made a fault.
func (fs *faults) apply(e *entry) bool {
	f, n := e.spec.apply(fs.srv)
	fs.mu.Lock()
	defer fs.mu.Unlock()
	e.applied++
	e.result = n
	if f != nil {
		e.made = append(e.made, f)
		e.live = append(e.live, f)
	}
	return f != nil
}

// run applies e's spec when due (at after add, then every every) and
// removes each fault it made lifetime after making it, until there is
// nothing left to do or ctx ends. made says whether add's own application
// made a fault.
func (fs *faults) run(ctx context.Context, e *entry, made bool) {
	spec := e.spec
	now := time.Now()
	var due time.Time // of the next application; zero when none is
	var removals []time.Time
	switch {
	case spec.at > 0:
		due = now.Add(spec.at)
	case spec.every > 0:
		due = now.Add(spec.every)
	}
	if made && spec.lifetime > 0 {
		removals = append(removals, now.Add(spec.lifetime))
	}
	for !due.IsZero() || len(removals) > 0 {
		wake := due
		if len(removals) > 0 && (wake.IsZero() || removals[0].Before(wake)) {
			wake = removals[0]
		}
		t := time.NewTimer(time.Until(wake))
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case now = <-t.C:
		}
		if len(removals) > 0 && !removals[0].After(now) {
			removals = removals[1:]
			fs.removeOldest(e)
		}
		if !due.IsZero() && !due.After(now) {
			if fs.apply(e) && spec.lifetime > 0 {
				removals = append(removals, now.Add(spec.lifetime))
			}
			due = time.Time{}
			if spec.every > 0 {
				due = now.Add(spec.every)
			}
		}
	}
}

// removeOldest removes the oldest fault e made that it has not removed.
func (fs *faults) removeOldest(e *entry) {
	fs.mu.Lock()
	f := e.live[0]
	e.live = e.live[1:]
	fs.mu.Unlock()
	f.Remove()
}

// remove stops the entry with id and removes every fault it made. It
// reports false if there is no such entry.
func (fs *faults) remove(id int) bool {
	fs.mu.Lock()
	i := slices.IndexFunc(fs.entries, func(e *entry) bool { return e.id == id })
	if i < 0 {
		fs.mu.Unlock()
		return false
	}
	e := fs.entries[i]
	fs.entries = slices.Delete(fs.entries, i, i+1)
	cancel, made := e.cancel, e.made
	fs.mu.Unlock()
	if cancel != nil {
		cancel()
	}
	for _, f := range made {
		f.Remove() // harmless for a fault removed already
	}
	return true
}

// list returns the status of every entry, oldest first.
func (fs *faults) list() []status {
	fs.mu.Lock()
	entries := slices.Clone(fs.entries)
	fs.mu.Unlock()
	out := make([]status, 0, len(entries))
	for _, e := range entries {
		out = append(out, fs.status(e))
	}
	return out
}

func (fs *faults) status(e *entry) status {
	fs.mu.Lock()
	st := status{ID: e.id, Spec: e.spec.text, Applied: e.applied, Result: e.result}
	made := slices.Clone(e.made)
	fs.mu.Unlock()
	for _, f := range made {
		st.Hits += f.Hits() // takes the server's lock, so not under fs.mu
	}
	return st
}

// close stops every goroutine and waits for them. The server's Close
// releases held publishes and drops every fault.
func (fs *faults) close() {
	fs.cancel()
	fs.wg.Wait()
}

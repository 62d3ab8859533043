// Package seqwindow remembers, for the most recently active (key,
// producer) pairs, which of a producer's sequence numbers were processed,
// so that a stamped copy of a processed message is known (S12 in
// DESIGN.md). It is pure: no I/O, no clock, no goroutine.
//
// For each pair it is nearly enough to remember the highest number
// processed, since the service delivers a key's messages in publish order
// and the subscriber runs them one at a time:
//
//   - A number at or below it is a copy, unless it is owed.
//   - A number more than one above it opens a gap: the numbers between
//     are owed from then on, and run when they come, late or redriven.
//   - A number processed whose ack failed is owed again ([Window.Undo]).
//
// The first number of a pair seen starts its sequence: a number below it
// is taken for a copy of a message processed before, unless it was
// redriven from a dead-letter topic, when it runs once, or the server may
// deliver out of order ([Window.AnyOrder]).
//
// The window keeps no clock: Check and Done are told the time, and Check
// reports how long the pair had been idle, so that its caller can tell a
// gap seen while a key stayed with it from one that may be another
// process's doing.
//
// # Bounds
//
// Every bound forgets towards running, never towards skipping: what it
// forgets may run again, a duplicate that [Result.Uncertain] reports, and
// no number is ever taken for a copy because its record was dropped.
//
//   - The window keeps the size most recently active pairs. Once it has
//     forgotten one, a number below the start of a pair it makes runs
//     rather than being taken for a copy: the pair may be one it forgot.
//   - A pair keeps at most [MaxRuns] runs of owed numbers. Past that, the
//     two runs closest together merge, and the numbers between them,
//     processed, are owed again.
//   - A pair keeps at most [MaxRuns] runs of redriven numbers below its
//     start. Past that, a new one is not kept, and its numbers, if
//     redriven again, run again.
package seqwindow

import (
	"slices"
	"sync"
	"time"

	"github.com/keyorder/keyorder/ordering"
)

// MaxRuns bounds the runs of owed numbers of one pair, and the runs of
// redriven numbers below its start.
const MaxRuns = 64

// A Result is what [Window.Check] found of one number.
type Result struct {
	// Copy is set for a copy of a number processed already; FirstCopy for
	// the first of a run of them, as a request stored twice brings.
	Copy, FirstCopy bool
	// GapFrom and GapTo are the numbers missing before this one, newly
	// found; both 0 when there is no new gap.
	GapFrom, GapTo uint64
	// Uncertain is set when the number is to run but may have run before:
	// a bound of the window was reached and what it forgot runs again.
	Uncertain bool
	// Idle is how long the pair had been inactive, by the times Check and
	// Done were given; 0 for a pair seen for the first time.
	Idle time.Duration
}

// A Window is safe for concurrent use. The zero value is not usable: make
// one with New.
type Window struct {
	size int
	mu   sync.Mutex
	m    map[pair]*entry
	root entry // root.next is the most recently active, root.prev the least
	// forgot is set once a pair has been forgotten: a pair made since may
	// be one seen before.
	forgot bool
	// anyOrder is set when the server may deliver a key's messages out
	// of order (AnyOrder).
	anyOrder bool
}

// New returns a window of size pairs, which must be positive.
func New(size int) *Window {
	w := &Window{size: size, m: make(map[pair]*entry, min(size, 1024))}
	w.root.next, w.root.prev = &w.root, &w.root
	return w
}

// AnyOrder tells w that the server may deliver a key's earlier message
// after a later one, as Google's emulator and pstest redeliver: then a
// number below the start of a pair is not taken for a copy, since it may
// be a message never processed, and it runs, uncertain, as after the
// window forgot a pair. Only a number processed in this window is a copy.
// Call it before the first Check.
func (w *Window) AnyOrder() { w.anyOrder = true }

type pair struct{ key, producer string }

// entry is what is remembered of one pair.
type entry struct {
	id pair
	// from is the first number seen; nothing is known below it. done is
	// the highest processed, edge the highest processed or reported
	// missing, so that a gap is reported once.
	from, done, edge uint64
	// epoch is the first number of the latest epoch begun after from, 0
	// if none: the older epochs' ends were never seen here, so below it,
	// as below from, a redriven number, or any on a server that
	// redelivers out of order, is a copy only if recorded (below).
	// oldDone is the highest number processed below epoch.
	epoch, oldDone uint64
	// owed are the runs of numbers at or below edge that are to run when
	// they come, ordered by number, at most MaxRuns.
	owed []run
	// below are the runs of redriven numbers below from that ran, oldest
	// first, at most MaxRuns; lostBelow is set once one was not kept.
	below     []run
	lostBelow bool
	// unsure is set when the entry was made after the window forgot a
	// pair: a number below from may not be a copy.
	unsure bool
	// copying is set while the pair's deliveries are copies.
	copying bool
	// seen is when the pair was last checked or done, as given.
	seen       time.Time
	prev, next *entry
}

// run is the numbers first to last; unsure when it holds numbers that
// were processed, merged in at a bound. id, when set, is the one message
// the run's single number is owed to: the number processed whose ack
// failed, which the service delivers again under its own ID. A copy
// under another ID is still a copy.
type run struct {
	first, last uint64
	unsure      bool
	id          string
}

func (r run) holds(n uint64) bool { return r.first <= n && n <= r.last }

// Check looks at the number st.Seq of key's producer st.Producer, about
// to be processed as the message id at now; redriven says the message
// came back from a dead-letter topic. A gap it reports is owed from then
// on.
func (w *Window) Check(key string, st ordering.Stamp, id string, redriven bool, now time.Time) Result {
	res, _ := w.CheckFirst(key, st, id, redriven, now)
	return res
}

// CheckFirst is Check, and also reports whether the pair was new to the
// window: nothing is known of its numbers before st.Seq, which is where
// it starts here, not where its producer started it. A first number
// above 1 of its epoch follows numbers this window never saw.
func (w *Window) CheckFirst(key string, st ordering.Stamp, id string, redriven bool, now time.Time) (res Result, first bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	e := w.touch(pair{key, st.Producer}, st.Seq)
	n := st.Seq
	if !e.seen.IsZero() {
		res.Idle = now.Sub(e.seen)
	} else {
		first = true
	}
	e.seen = now
	switch owed := find(e.owed, n); {
	case owed >= 0 && e.owed[owed].id != "" && e.owed[owed].id != id:
		return e.copied(), false // owed to the message itself, not to a copy of it
	case owed >= 0:
		res.Uncertain = e.owed[owed].unsure
	case n < e.from && (redriven || e.unsure):
		if i := find(e.below, n); i >= 0 {
			return e.copied(), false
		}
		res.Uncertain = e.unsure || e.lostBelow
	case n < e.epoch && (redriven || e.unsure):
		// An older epoch than the one running: its end was never seen
		// here, so its numbers are no copies unless recorded.
		if i := find(e.below, n); i >= 0 {
			return e.copied(), false
		}
		res.Uncertain = n <= e.oldDone || e.unsure || e.lostBelow
	case n <= e.done:
		return e.copied(), false
	}
	e.copying = false
	if last := max(e.done, e.edge); n > last+1 && expected(last, n) > last+1 {
		e.epoch, e.oldDone = expected(last, n), max(e.oldDone, e.done)
	}
	if from := expected(max(e.done, e.edge), n); n > from {
		res.GapFrom, res.GapTo = from, n-1
		e.owe(run{first: from, last: n - 1})
	}
	e.edge = max(e.edge, n-1)
	return res, first
}

func (e *entry) copied() Result {
	first := !e.copying
	e.copying = true
	return Result{Copy: true, FirstCopy: first}
}

// expected returns the number expected after last, the highest processed
// or reported missing, when seq comes: last+1, or the first number of
// seq's epoch if seq starts a higher one. A gap never spans epochs.
func expected(last, seq uint64) uint64 {
	if epoch, _ := ordering.SplitSeq(seq); epoch > uint32(last>>32) {
		return ordering.MakeSeq(epoch, 1)
	}
	return last + 1
}

// Done records that st.Seq of key's producer was processed, at now.
func (w *Window) Done(key string, st ordering.Stamp, now time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	e := w.touch(pair{key, st.Producer}, st.Seq)
	e.seen = now
	n := st.Seq
	e.paid(n)
	if n < max(e.from, e.epoch) && find(e.below, n) < 0 {
		var lost bool
		e.below, lost = addRun(e.below, n)
		e.lostBelow = e.lostBelow || lost
	}
	e.done = max(e.done, n)
	e.edge = max(e.edge, e.done)
}

// Undo records that st.Seq, processed as the message id, was not acked
// after all (its ack failed on an exactly-once subscription), so that it
// runs again when the service delivers that message again; a copy of it
// under another ID is still a copy. A pair forgotten since needs nothing:
// a number below a new pair's start runs once the window has forgotten
// one.
func (w *Window) Undo(key string, st ordering.Stamp, id string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	e := w.m[pair{key, st.Producer}]
	n := st.Seq
	if e == nil || n > e.done {
		return
	}
	if i := find(e.below, n); i >= 0 {
		e.below = cut(e.below, i, n)
		return
	}
	e.owe(run{first: n, last: n, id: id})
}

// Len returns the number of pairs remembered.
func (w *Window) Len() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.m)
}

// owe adds r to the numbers owed, keeping them ordered; past MaxRuns the
// two runs closest together merge.
func (e *entry) owe(r run) {
	if i := find(e.owed, r.first); i >= 0 && e.owed[i].holds(r.last) {
		return // owed already
	}
	i, _ := slices.BinarySearchFunc(e.owed, r.first, func(o run, n uint64) int { return cmpU(o.first, n) })
	e.owed = slices.Insert(e.owed, i, r)
	if len(e.owed) > MaxRuns {
		e.owed = mergeClosest(e.owed)
	}
}

// paid removes n from the numbers owed: it has run.
func (e *entry) paid(n uint64) {
	if i := find(e.owed, n); i >= 0 {
		e.owed = cut(e.owed, i, n)
		if len(e.owed) > MaxRuns {
			e.owed = mergeClosest(e.owed)
		}
	}
}

// mergeClosest merges the two neighbouring runs of runs, ordered by
// number, with the fewest numbers between them; the merged run is unsure.
func mergeClosest(runs []run) []run {
	best := 1
	for i := 2; i < len(runs); i++ {
		if runs[i].first-runs[i-1].last < runs[best].first-runs[best-1].last {
			best = i
		}
	}
	runs[best-1] = run{first: runs[best-1].first, last: runs[best].last, unsure: true} // owed to any ID
	return slices.Delete(runs, best, best+1)
}

// cut removes n from runs[i], which holds it, splitting the run if n is
// inside it.
func cut(runs []run, i int, n uint64) []run {
	r := runs[i]
	switch {
	case r.first == r.last:
		return slices.Delete(runs, i, i+1)
	case n == r.first:
		runs[i].first++
	case n == r.last:
		runs[i].last--
	default:
		runs[i].last = n - 1
		return slices.Insert(runs, i+1, run{first: n + 1, last: r.last, unsure: r.unsure, id: r.id})
	}
	return runs
}

// addRun adds n to runs, extending the newest run when n follows it, as a
// batch of redriven numbers does. A full list keeps what it holds and
// reports that n was not kept: forgetting the oldest instead would make
// each number of a second redrive, as it runs, push out the next.
func addRun(runs []run, n uint64) ([]run, bool) {
	if k := len(runs) - 1; k >= 0 && runs[k].last+1 == n {
		runs[k].last = n
		return runs, false
	}
	if len(runs) >= MaxRuns {
		return runs, true
	}
	return append(runs, run{first: n, last: n}), false
}

// find returns the index of the run of runs that holds n, or -1.
func find(runs []run, n uint64) int {
	for i, r := range runs {
		if r.holds(n) {
			return i
		}
	}
	return -1
}

func cmpU(a, b uint64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// touch returns the entry of id, made for a sequence whose first number
// seen is first if it is new, as the most recently active; a new entry in
// a full window takes the place of the least recently active. w.mu must
// be held.
func (w *Window) touch(id pair, first uint64) *entry {
	e := w.m[id]
	switch {
	case e != nil:
		e.prev.next, e.next.prev = e.next, e.prev
	case len(w.m) >= w.size:
		e = w.root.prev
		delete(w.m, e.id)
		e.prev.next, e.next.prev = e.next, e.prev
		w.forgot = true
		*e = entry{id: id, from: first, done: first - 1, edge: first - 1, unsure: true}
		w.m[id] = e
	default:
		e = &entry{id: id, from: first, done: first - 1, edge: first - 1, unsure: w.forgot || w.anyOrder}
		w.m[id] = e
	}
	e.prev, e.next = &w.root, w.root.next
	e.next.prev, w.root.next = e, e
	return e
}

package subscriber

import (
	"fmt"
	"slices"
	"sync"

	"github.com/keyorder/keyorder/ordering"
)

// Sequence checks use the stamp a producer puts on each keyed message
// ([ordering.Stamp]): its ID, and the message's number in its sequence for
// the key, which counts from 1 and never reuses a number.
//
// The service delivers a key's messages in publish order (on an ordered
// subscription), and a lane runs them one at a time in that order, so for
// each (key, producer) it is nearly enough to remember the highest number
// processed. Checked by the call path (call.go), just before the handler
// call:
//
//   - A number at or below it is a copy of a message processed already:
//     the service stored one publish twice, under two message IDs, when the
//     official client retried a request whose response was lost. It is
//     acked without calling the handler, on top of S6's ID window, which
//     cannot see it.
//   - A number more than one above it is a gap: the numbers between were
//     never processed here. They failed to publish (republished or not,
//     they were not stored under those numbers), were dead-lettered, or
//     went to another client of the subscription. The gap is reported to
//     [WithGapHandler], and the message is then processed as usual.
//   - A number reported missing is owed: it is no copy when it comes, late
//     or redriven from a dead-letter topic, and runs once. So is a number
//     processed whose ack failed on an exactly-once subscription (the
//     service will deliver it again). A sequence remembers its 64 newest
//     runs of owed numbers; the numbers of an older run, if they come, are
//     taken for copies.
//
// The first stamp of a (key, producer) seen in a Receive starts its
// sequence: nothing is reported missing before it, and a number below it is
// taken for a copy of a message processed before this Receive, unless it
// was redriven ([DeadLetterSourceAttribute]): then it runs, once.
//
// A producer that counts a key afresh starts a new epoch of its numbers
// (see [ordering.Stamp], Epochs), whose numbers are all above the old
// epoch's. A number of a higher epoch than the last one seen starts a new
// run: its first number is 1, and a higher one is a gap from 1; the jump
// from the old epoch is not a gap, since only the producer knew where the
// old epoch stopped. A number of a lower epoch is below the highest
// processed, hence a copy.
//
// The state is bounded like the ID window: the [WithSequenceWindow] most
// recently active (key, producer) pairs are remembered, the least recently
// active forgotten first, so idle keys do not pile up. A pair forgotten
// and seen again starts over, owed numbers and all. Messages without a
// key, without a stamp, or on an unordered subscription, where the service
// promises no order, are not checked.

// DeadLetterSourceAttribute is the attribute the service adds to a message
// it forwards to a dead-letter topic, naming the subscription it came
// from. A stamped message that carries it was redriven: republished from
// the dead-letter topic with its attributes. Its number, if it is older
// than what this Receive has seen of its key, runs rather than being taken
// for a copy (S12).
const DeadLetterSourceAttribute = "CloudPubSubDeadLetterSourceSubscription"

// isRedriven reports whether a message with attrs came back from a
// dead-letter topic.
func isRedriven(attrs map[string]string) bool {
	_, ok := attrs[DeadLetterSourceAttribute]
	return ok
}

// A Gap is a run of a producer's sequence numbers for a key that Receive
// has not processed, found when a later number of the same key and
// producer came up for processing. [WithGapHandler] is told of each. A gap
// lies within one epoch of the producer's numbers ([ordering.SplitSeq]).
type Gap struct {
	Key      string
	Producer string
	// From and To are the first and last missing numbers.
	From, To uint64
	// MessageID and Seq are the message after the gap, which is then
	// processed as usual.
	MessageID string
	Seq       uint64
}

// String describes g as a person reads it, numbers as epoch.n
// ([ordering.FormatSeq]): "key k, producer p: 0.4 to 0.5 missing before
// 0.6 (message m)".
func (g Gap) String() string {
	missing := ordering.FormatSeq(g.From)
	if g.To != g.From {
		missing += " to " + ordering.FormatSeq(g.To)
	}
	return fmt.Sprintf("key %s, producer %s: %s missing before %s (message %s)",
		g.Key, g.Producer, missing, ordering.FormatSeq(g.Seq), g.MessageID)
}

// seqID names one producer's sequence for one key.
type seqID struct{ key, producer string }

// seqEntry is what is remembered of one sequence.
type seqEntry struct {
	id seqID
	// from is the first number of the sequence this Receive saw: nothing
	// is known of the numbers below it, which are taken for copies of
	// messages processed before, unless redriven from a dead-letter
	// topic.
	from uint64
	// done is the highest number processed: a number at or below it is a
	// copy, unless owed. edge is the highest number known to be
	// processed or reported missing, so that a gap is reported once, and
	// a message retried in place, or one that failed for good and was
	// dead-lettered, is not reported twice.
	done, edge uint64
	// owed holds the numbers at or below edge that are to run when they
	// come, though later numbers ran: those reported missing (a gap, a
	// dead letter), and those processed whose ack failed on an
	// exactly-once subscription (undo). Runs of numbers, in the order they
	// were added, at most maxOwed; nearly always empty.
	owed []seqRun
	// below holds the numbers below from that ran here, redriven dead
	// letters, at most maxOwed: a second redrive of one is a copy.
	below []uint64
	// copying is set while the entry's deliveries are copies: a run of
	// them, as a request stored twice brings, is logged once.
	copying bool
	// prev and next link the entries from the most to the least recently
	// active.
	prev, next *seqEntry
}

// seqRun is the numbers first to last.
type seqRun struct{ first, last uint64 }

// maxOwed bounds the runs of owed numbers of one sequence, and the
// redriven numbers below its start. Past it, the oldest run is forgotten:
// its numbers, if they come, are taken for copies.
const maxOwed = 64

// sequences holds the entries of one Receive. Safe for concurrent use: mu
// guards every field but size.
type sequences struct {
	size int // set once; 0 turns the checks off
	mu   sync.Mutex
	m    map[seqID]*seqEntry
	root seqEntry // root.next is the most recently active, root.prev the least
}

func newSequences(size int) *sequences {
	s := &sequences{size: size, m: make(map[seqID]*seqEntry, min(size, 1024))}
	s.root.next, s.root.prev = &s.root, &s.root
	return s
}

// check looks at a stamped delivery about to be processed; redriven says
// it came back from a dead-letter topic. It reports whether the delivery
// is a copy of a message processed already, and if so whether it is the
// first of a run of copies, and returns the gap before it, if a new one
// opened. A gap's numbers are owed from then on.
func (s *sequences) check(key string, st ordering.Stamp, redriven bool) (copied, first bool, gap *Gap) {
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.touch(seqID{key, st.Producer}, st.Seq)
	if st.Seq <= e.done && !e.isOwed(st.Seq) && !(redriven && st.Seq < e.from && !slices.Contains(e.below, st.Seq)) {
		first = !e.copying
		e.copying = true
		return true, first, nil
	}
	e.copying = false
	if from := expected(max(e.done, e.edge), st.Seq); st.Seq > from {
		gap = &Gap{Key: key, Producer: st.Producer, From: from, To: st.Seq - 1, Seq: st.Seq}
		e.owe(seqRun{from, st.Seq - 1})
	}
	e.edge = max(e.edge, st.Seq-1)
	return false, false, gap
}

// expected returns the number expected after last, the highest processed or
// reported missing, when seq comes: last+1, or the first number of seq's
// epoch if seq starts a higher one. A gap is never reported across epochs.
func expected(last, seq uint64) uint64 {
	if epoch, _ := ordering.SplitSeq(seq); epoch > uint32(last>>32) {
		return ordering.MakeSeq(epoch, 1)
	}
	return last + 1
}

// done records that the delivery with stamp st was processed.
func (s *sequences) done(key string, st ordering.Stamp) {
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.touch(seqID{key, st.Producer}, st.Seq)
	e.paid(st.Seq)
	if st.Seq < e.from && !slices.Contains(e.below, st.Seq) {
		e.below = appendBounded(e.below, st.Seq)
	}
	e.done = max(e.done, st.Seq)
	e.edge = max(e.edge, e.done)
}

// undo records that the delivery with stamp st, processed, was not acked
// after all (its ack failed on an exactly-once subscription), so that it
// runs again when the service delivers it again, as its ID does in the S6
// window. A sequence forgotten since needs nothing: it starts over.
func (s *sequences) undo(key string, st ordering.Stamp) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if e := s.m[seqID{key, st.Producer}]; e != nil && st.Seq <= e.done {
		if i := slices.Index(e.below, st.Seq); i >= 0 {
			e.below = slices.Delete(e.below, i, i+1)
		} else {
			e.owe(seqRun{st.Seq, st.Seq})
		}
	}
}

// isOwed reports whether n is owed.
func (e *seqEntry) isOwed(n uint64) bool {
	for _, r := range e.owed {
		if r.first <= n && n <= r.last {
			return true
		}
	}
	return false
}

// owe adds the numbers of r to those owed, forgetting the oldest run if
// there are too many.
func (e *seqEntry) owe(r seqRun) {
	if !e.isOwed(r.first) || !e.isOwed(r.last) {
		e.owed = appendBounded(e.owed, r)
	}
}

// paid removes n from the numbers owed: it has run.
func (e *seqEntry) paid(n uint64) {
	for i, r := range e.owed {
		if r.first > n || n > r.last {
			continue
		}
		switch {
		case r.first == r.last:
			e.owed = slices.Delete(e.owed, i, i+1)
		case n == r.first:
			e.owed[i].first++
		case n == r.last:
			e.owed[i].last--
		default:
			e.owed[i].last = n - 1
			e.owed = appendBounded(e.owed, seqRun{n + 1, r.last})
		}
		return
	}
}

// appendBounded appends v to list, dropping its first element if it then
// holds more than maxOwed.
func appendBounded[T any](list []T, v T) []T {
	if len(list) >= maxOwed {
		list = slices.Delete(list, 0, 1)
	}
	return append(list, v)
}

// touch returns the entry of id, made for a sequence whose first number
// seen is first if it is new, as the most recently active; a new entry in
// a full window takes the place of the least recently active. s.mu must
// be held.
func (s *sequences) touch(id seqID, first uint64) *seqEntry {
	e := s.m[id]
	switch {
	case e != nil:
		e.prev.next, e.next.prev = e.next, e.prev
	case len(s.m) >= s.size:
		e = s.root.prev
		delete(s.m, e.id)
		e.prev.next, e.next.prev = e.next, e.prev
		*e = seqEntry{id: id, from: first, done: first - 1, edge: first - 1}
		s.m[id] = e
	default:
		e = &seqEntry{id: id, from: first, done: first - 1, edge: first - 1}
		s.m[id] = e
	}
	e.prev, e.next = &s.root, s.root.next
	e.next.prev, s.root.next = e, e
	return e
}

// len returns the number of sequences remembered.
func (s *sequences) len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.m)
}

// sequenced reports whether j's stamp is checked in this Receive.
func (r *receiver) sequenced(j *job) bool {
	return r.seqs.size > 0 && r.s.ordered && j.d.Key != "" && j.d.Seq != 0
}

// copyOfProcessed is the sequence check of j, in its turn just before the
// handler call: it reports whether j is a copy of a message processed
// already, and reports a gap before it to the WithGapHandler callback.
func (r *receiver) copyOfProcessed(j *job) bool {
	if !r.sequenced(j) {
		return false
	}
	d := &j.d
	copied, first, gap := r.seqs.check(d.Key, ordering.Stamp{Producer: d.Producer, Seq: d.Seq}, j.redriven)
	ctx := handlerContext{Context: j.ctx, life: r.handlerCtx}
	if copied && r.cfg.dedupWindow > 0 {
		r.s.counts.duplicates.Add(1)
		r.obs.sequenceDuplicate(ctx, first, d.Key, d.Producer, d.Seq, d.ID)
		return true
	}
	if gap != nil {
		gap.MessageID = d.ID
		r.s.counts.gaps.Add(1)
		r.obs.sequenceGap(ctx, gap.Key, gap.Producer, gap.From, gap.To)
		r.reportGap(*gap)
	}
	return false
}

// processedStamp records j's stamp as processed, before j is acked, so
// that a copy that comes after the ack is known.
func (r *receiver) processedStamp(j *job) {
	if r.sequenced(j) {
		r.seqs.done(j.d.Key, ordering.Stamp{Producer: j.d.Producer, Seq: j.d.Seq})
	}
}

// reportGap tells the WithGapHandler callback about g. A panic in the
// callback is recovered and logged.
func (r *receiver) reportGap(g Gap) {
	if r.cfg.onGap == nil {
		return
	}
	defer r.recoverCallback("gap handler")
	r.cfg.onGap(g)
}

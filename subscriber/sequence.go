package subscriber

import (
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
// each (key, producer) it is enough to remember the highest number
// processed. Checked in the turn, just before the handler call:
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
//
// The first stamp of a (key, producer) seen in a Receive starts its
// sequence: nothing is reported missing before it.
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
// and seen again starts over. Messages without a key, without a stamp, or
// on an unordered subscription, where the service promises no order, are
// not checked.

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

// seqID names one producer's sequence for one key.
type seqID struct{ key, producer string }

// seqEntry is what is remembered of one sequence.
type seqEntry struct {
	id seqID
	// done is the highest number processed: a number at or below it is a
	// copy. edge is the highest number known to be processed or reported
	// missing, so that a gap is reported once, and a message retried in
	// place, or one that failed for good and was dead-lettered, is not
	// reported twice.
	done, edge uint64
	// copying is set while the entry's deliveries are copies: a run of
	// them, as a request stored twice brings, is logged once.
	copying bool
	// again holds numbers at or below done that are to run again, once
	// each: their acks failed on an exactly-once subscription (undo).
	// Nearly always empty.
	again []uint64
	// prev and next link the entries from the most to the least recently
	// active.
	prev, next *seqEntry
}

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

// check looks at a stamped delivery about to be processed. It reports
// whether the delivery is a copy of a message processed already, and if so
// whether it is the first of a run of copies, and returns the gap before
// it, if a new one opened.
func (s *sequences) check(key string, st ordering.Stamp) (copied, first bool, gap *Gap) {
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.touch(seqID{key, st.Producer}, st.Seq-1)
	if st.Seq <= e.done {
		if i := slices.Index(e.again, st.Seq); i >= 0 {
			e.again = slices.Delete(e.again, i, i+1)
			e.copying = false
			return false, false, nil
		}
		first = !e.copying
		e.copying = true
		return true, first, nil
	}
	e.copying = false
	if from := expected(max(e.done, e.edge), st.Seq); st.Seq > from {
		gap = &Gap{Key: key, Producer: st.Producer, From: from, To: st.Seq - 1, Seq: st.Seq}
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
	e := s.m[seqID{key, st.Producer}]
	switch {
	case e == nil || st.Seq > e.done:
	case st.Seq == e.done && len(e.again) == 0:
		e.done--
	case len(e.again) < maxAgain && !slices.Contains(e.again, st.Seq):
		e.again = append(e.again, st.Seq)
	}
}

// maxAgain bounds the numbers of one sequence waiting to run again; past
// it, a message whose ack failed is taken as a copy when it comes back,
// unless its ID does not show it processed.
const maxAgain = 64

// touch returns the entry of id, made with done and edge at start if it is
// new, as the most recently active; a new entry in a full window takes the
// place of the least recently active. s.mu must be held.
func (s *sequences) touch(id seqID, start uint64) *seqEntry {
	e := s.m[id]
	switch {
	case e != nil:
		e.prev.next, e.next.prev = e.next, e.prev
	case len(s.m) >= s.size:
		e = s.root.prev
		delete(s.m, e.id)
		e.prev.next, e.next.prev = e.next, e.prev
		*e = seqEntry{id: id, done: start, edge: start}
		s.m[id] = e
	default:
		e = &seqEntry{id: id, done: start, edge: start}
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
	copied, first, gap := r.seqs.check(d.Key, ordering.Stamp{Producer: d.Producer, Seq: d.Seq})
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

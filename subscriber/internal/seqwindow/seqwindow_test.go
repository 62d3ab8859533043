package seqwindow

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/keyorder/keyorder/ordering"
)

func stamp(seq uint64) ordering.Stamp { return ordering.Stamp{Producer: "p", Seq: seq} }

// t0 is the time the tests tell the window, where it does not matter.
var t0 = time.Unix(1_000_000, 0)

// idOf is the message ID the tests give number seq.
func idOf(seq uint64) string { return fmt.Sprint("m", seq) }

// gap returns the gap res reports, zero for none.
func gap(res Result) [2]uint64 { return [2]uint64{res.GapFrom, res.GapTo} }

// TestCheck walks one (key, producer) sequence through the cases the
// package doc names, step by step.
func TestCheck(t *testing.T) {
	t.Parallel()
	type step struct {
		seq      uint64
		redriven bool // republished from a dead-letter topic
		done     bool // processed after the check
		copied   bool
		gap      [2]uint64 // From, To; zero for none
		comment  string
	}
	steps := []step{
		{seq: 5, done: true, comment: "the first stamp starts the sequence: nothing missing before it"},
		{seq: 6, done: true},
		{seq: 6, copied: true, comment: "a copy stored twice"},
		{seq: 4, copied: true, comment: "an older copy"},
		{seq: 9, gap: [2]uint64{7, 8}, comment: "7 and 8 never came"},
		{seq: 9, done: true, comment: "9 retried in place: the gap is not reported again"},
		{seq: 10, comment: "10 fails for good and goes to the dead-letter topic"},
		{seq: 11, gap: [2]uint64{10, 10}, done: true, comment: "10 was never processed here"},
		{seq: 12, done: true},
		{seq: 11, copied: true},
		{seq: 10, redriven: true, done: true, comment: "10 is redriven: it was reported missing, so it runs"},
		{seq: 10, redriven: true, copied: true, comment: "redriven twice: processed now, so a copy"},
		{seq: 8, done: true, comment: "8 comes late: it was reported missing, so it runs"},
		{seq: 7, comment: "7 comes late and fails"},
		{seq: 7, done: true, comment: "and runs on its retry: still owed"},
		{seq: 7, copied: true, comment: "then it is a copy"},
		{seq: 8, copied: true},
		{seq: 3, redriven: true, done: true, comment: "below the sequence's start, redriven: runs"},
		{seq: 3, redriven: true, copied: true, comment: "once"},
		{seq: 2, copied: true, comment: "below the start and not redriven: a copy of a message processed before"},
	}
	w := New(10)
	for i, st := range steps {
		res := w.Check("k", stamp(st.seq), idOf(st.seq), st.redriven, t0)
		assert.Equal(t, st.copied, res.Copy, "step %d (seq %d): %s", i, st.seq, st.comment)
		assert.Equal(t, st.gap, gap(res), "step %d (seq %d): %s", i, st.seq, st.comment)
		assert.False(t, res.Uncertain, "step %d: no bound reached", i)
		if st.done {
			w.Done("k", stamp(st.seq), t0)
		}
	}
}

// TestAnyOrder: on a server that may deliver a key's messages out of
// order, a number below the start of a pair runs, uncertain, since it
// may never have been processed; once processed here it is a copy, as is
// a number at or above the start that was processed. Without AnyOrder the
// same number is taken for a copy.
func TestAnyOrder(t *testing.T) {
	t.Parallel()
	w := New(10)
	w.AnyOrder()
	res := w.Check("k", stamp(9), idOf(9), false, t0)
	assert.Equal(t, Result{}, res, "the first number starts the pair")
	for _, n := range []uint64{6, 4, 5} {
		res = w.Check("k", stamp(n), idOf(n), false, t0)
		assert.False(t, res.Copy, "%d, delivered after 9, may never have run", n)
		assert.True(t, res.Uncertain, "%d may be a copy of a message processed before", n)
		assert.Equal(t, [2]uint64{}, gap(res), "nothing is missing below the start")
		w.Done("k", stamp(n), t0)
	}
	for _, n := range []uint64{4, 5, 6} {
		assert.True(t, w.Check("k", stamp(n), idOf(n), false, t0).Copy, "%d ran here", n)
	}
	w.Done("k", stamp(9), t0)
	assert.True(t, w.Check("k", stamp(9), idOf(9), false, t0).Copy, "9 ran here")
	assert.Equal(t, [2]uint64{10, 10}, gap(w.Check("k", stamp(11), idOf(11), false, t0)), "a gap above is still a gap")

	inOrder := New(10)
	inOrder.Check("k", stamp(9), idOf(9), false, t0)
	assert.True(t, inOrder.Check("k", stamp(4), idOf(4), false, t0).Copy, "on the service, 4 after 9 is a copy")
}

// TestEpochs walks a sequence across the epochs of a producer that counts
// the key afresh: a higher epoch starts a new run from 1, a lower one is a
// copy, and a gap is reported within an epoch only.
func TestEpochs(t *testing.T) {
	t.Parallel()
	seq := ordering.MakeSeq
	steps := []struct {
		seq     uint64
		copied  bool
		gap     [2]uint64
		comment string
	}{
		{seq: seq(3, 1), comment: "the first stamp starts the sequence"},
		{seq: seq(3, 2)},
		{seq: seq(3, 3)},
		{seq: seq(7, 1), comment: "a new epoch: the end of epoch 3 is not a gap"},
		{seq: seq(7, 2)},
		{seq: seq(3, 4), copied: true, comment: "a lower epoch is older: a copy"},
		{seq: seq(7, 2), copied: true},
		{seq: seq(7, 5), gap: [2]uint64{seq(7, 3), seq(7, 4)}, comment: "a gap within the epoch"},
		{seq: seq(9, 3), gap: [2]uint64{seq(9, 1), seq(9, 2)}, comment: "a new epoch starts at 1"},
		{seq: seq(9, 4)},
		{seq: seq(10, 0), comment: "number 0 of an epoch: not a gap"},
		{seq: seq(10, 1)},
	}
	w := New(10)
	for i, st := range steps {
		res := w.Check("k", stamp(st.seq), idOf(st.seq), false, t0)
		assert.Equal(t, st.copied, res.Copy, "step %d: %s", i, st.comment)
		assert.Equal(t, st.gap, gap(res), "step %d: %s", i, st.comment)
		if !res.Copy {
			w.Done("k", stamp(st.seq), t0)
		}
	}
}

// TestPerProducerAndKey checks that sequences of different producers of
// one key, and of different keys, do not mix.
func TestPerProducerAndKey(t *testing.T) {
	t.Parallel()
	w := New(10)
	for _, id := range []pair{{"k", "a"}, {"k", "b"}, {"j", "a"}} {
		for seq := uint64(1); seq <= 3; seq++ {
			st := ordering.Stamp{Producer: id.producer, Seq: seq}
			res := w.Check(id.key, st, "", false, t0)
			require.Equal(t, Result{}, res, "%v %d", id, seq)
			w.Done(id.key, st, t0)
		}
	}
	assert.Equal(t, 3, w.Len())
}

// TestUndo checks that a number whose ack failed runs again once, whether
// or not later numbers were processed since, and that undoing a number
// never processed changes nothing.
func TestUndo(t *testing.T) {
	t.Parallel()
	w := New(10)
	run := func(seq uint64) (copied bool) {
		res := w.Check("k", stamp(seq), idOf(seq), false, t0)
		require.Zero(t, gap(res), "seq %d", seq)
		if !res.Copy {
			w.Done("k", stamp(seq), t0)
		}
		return res.Copy
	}
	undo := func(seq uint64) { w.Undo("k", stamp(seq), idOf(seq)) }
	for seq := uint64(1); seq <= 3; seq++ {
		require.False(t, run(seq))
	}
	undo(3)
	assert.False(t, run(3), "3 runs again")
	assert.True(t, run(3), "once")
	undo(2)
	assert.False(t, run(2), "2 runs again")
	assert.True(t, run(2), "once")
	undo(9) // never processed
	assert.False(t, run(4))
	assert.True(t, run(3), "3 is still processed")
	undo(1)
	undo(1)
	assert.False(t, run(1), "1 runs again")
	assert.True(t, run(1), "an ack failing twice before the message came back runs it once")
	require.False(t, run(5))
	res := w.Check("k", stamp(6), idOf(6), false, t0)
	require.False(t, res.Copy)
	undo(5)
	w.Done("k", stamp(6), t0)
	assert.False(t, run(5), "5 runs again after 6")
	assert.True(t, run(5), "once")
}

// TestCopyRuns checks that copies come in runs, the first of each marked.
func TestCopyRuns(t *testing.T) {
	t.Parallel()
	w := New(10)
	var firsts []bool
	for _, seq := range []uint64{1, 2, 3, 1, 2, 3, 4, 2, 3, 5} {
		res := w.Check("k", stamp(seq), idOf(seq), false, t0)
		if res.Copy {
			firsts = append(firsts, res.FirstCopy)
		} else {
			w.Done("k", stamp(seq), t0)
		}
	}
	assert.Equal(t, []bool{true, false, false, true, false}, firsts, "two runs: 1..3 again, and 2..3")
}

// owedEveryOther processes 1, 3, 5, ..., 2*runs+1, so that 2, 4, ...,
// 2*runs are owed, each a run of its own.
func owedEveryOther(t *testing.T, w *Window, runs uint64) {
	for i := uint64(0); i <= runs; i++ {
		res := w.Check("k", stamp(2*i+1), idOf(2*i+1), false, t0)
		require.False(t, res.Copy)
		if i > 0 {
			require.Equal(t, [2]uint64{2 * i, 2 * i}, gap(res))
		}
		w.Done("k", stamp(2*i+1), t0)
	}
}

// TestOwedBound checks the bound of owed runs at its edge and one past it:
// at MaxRuns every owed number runs and nothing processed does; one past,
// every owed number still runs, and what the merge forgot runs again,
// marked uncertain. No owed number is ever taken for a copy.
func TestOwedBound(t *testing.T) {
	t.Parallel()
	for _, runs := range []uint64{MaxRuns, MaxRuns + 1, 3 * MaxRuns} {
		t.Run(fmt.Sprint(runs), func(t *testing.T) {
			t.Parallel()
			w := New(10)
			owedEveryOther(t, w, runs)
			for i := uint64(1); i <= runs; i++ {
				res := w.Check("k", stamp(2*i), idOf(2*i), false, t0)
				require.False(t, res.Copy, "%d is owed: it must run", 2*i)
				w.Done("k", stamp(2*i), t0)
			}
			var again, unsure int
			for i := uint64(0); i <= runs; i++ {
				res := w.Check("k", stamp(2*i+1), idOf(2*i+1), false, t0)
				if !res.Copy {
					again++
					if res.Uncertain {
						unsure++
					}
					w.Done("k", stamp(2*i+1), t0)
				}
			}
			if runs <= MaxRuns {
				assert.Zero(t, again, "within the bound, processed numbers are copies")
			} else {
				assert.Positive(t, again, "past the bound, some processed numbers run again")
				assert.Equal(t, again, unsure, "every one of them is marked uncertain")
			}
		})
	}
}

// TestPayingInsideAFullGap is the middle of a gap paid while MaxRuns runs
// are owed: the split must not drop the oldest run, whose number would
// then be acked unrun.
func TestPayingInsideAFullGap(t *testing.T) {
	t.Parallel()
	w := New(10)
	// 64 runs owed: a wide one first (2..10), then 12, 14, ...
	require.False(t, w.Check("k", stamp(1), idOf(1), false, t0).Copy)
	w.Done("k", stamp(1), t0)
	require.Equal(t, [2]uint64{2, 10}, gap(w.Check("k", stamp(11), idOf(11), false, t0)))
	w.Done("k", stamp(11), t0)
	for i := uint64(1); i < MaxRuns; i++ {
		n := 11 + 2*i
		require.Equal(t, [2]uint64{n - 1, n - 1}, gap(w.Check("k", stamp(n), idOf(n), false, t0)))
		w.Done("k", stamp(n), t0)
	}
	// 6 comes late, from the middle of the oldest run.
	require.False(t, w.Check("k", stamp(6), idOf(6), false, t0).Copy)
	w.Done("k", stamp(6), t0)
	for _, n := range []uint64{2, 3, 4, 5, 7, 8, 9, 10, 12, 10 + 2*MaxRuns} {
		assert.False(t, w.Check("k", stamp(n), idOf(n), false, t0).Copy, "%d is still owed", n)
	}
}

// TestRedrivenBound checks the redriven numbers below a sequence's start:
// a batch of MaxRuns and of more than MaxRuns, redriven twice, runs once,
// and a batch of MaxRuns+1 separate runs forgets only its oldest, which
// then runs again, marked uncertain.
func TestRedrivenBound(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		nums  []uint64
		again int
	}{
		{"contiguous-64", seqs(1, 1, MaxRuns), 0},
		{"contiguous-200", seqs(1, 1, 200), 0},
		{"separate-64", seqs(1, 2, MaxRuns), 0},
		{"separate-65", seqs(1, 2, MaxRuns+1), 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			w := New(10)
			start := uint64(1000)
			require.False(t, w.Check("k", stamp(start), idOf(start), false, t0).Copy)
			w.Done("k", stamp(start), t0)
			for _, n := range tc.nums {
				require.False(t, w.Check("k", stamp(n), idOf(n), true, t0).Copy, "%d redriven: runs", n)
				w.Done("k", stamp(n), t0)
			}
			again := 0
			for _, n := range tc.nums {
				if res := w.Check("k", stamp(n), idOf(n), true, t0); !res.Copy {
					again++
					assert.True(t, res.Uncertain, "%d ran again: marked uncertain", n)
					w.Done("k", stamp(n), t0)
				}
			}
			assert.Equal(t, tc.again, again, "redriven a second time")
		})
	}
}

// seqs returns count numbers from first, step apart.
func seqs(first, step uint64, count int) []uint64 {
	out := make([]uint64, count)
	for i := range out {
		out[i] = first + uint64(i)*step
	}
	return out
}

// TestPairBound checks the window's size at its edge and one past: the
// least recently active pair is forgotten, and once one has been, a
// number below the start of a new pair runs, marked uncertain, rather
// than being taken for a copy.
func TestPairBound(t *testing.T) {
	t.Parallel()
	const size = 100
	w := New(size)
	process := func(key string, seq uint64) Result {
		res := w.Check(key, stamp(seq), idOf(seq), false, t0)
		if !res.Copy {
			w.Done(key, stamp(seq), t0)
		}
		return res
	}
	for i := 0; i < size; i++ {
		process(fmt.Sprint("k", i), 5)
	}
	assert.True(t, process("k0", 4).Copy, "at the edge nothing is forgotten: below the start is a copy")
	process("k-extra", 5) // one past: k1, the least recently active, goes
	assert.Equal(t, size, w.Len())
	assert.True(t, process("k0", 5).Copy, "a recently active pair is remembered")
	res := process("k1", 5)
	assert.False(t, res.Copy, "a forgotten pair starts over")
	res = process("k1", 4)
	assert.False(t, res.Copy, "below a new pair's start, once the window forgot one: runs")
	assert.True(t, res.Uncertain)
}

// TestUndoIsOwedToItsMessage: a number whose ack failed runs again for
// its own message only. A copy of it under another ID, which comes while
// the official client reports a request's every ack failed though the
// service applied them, stays a copy.
func TestUndoIsOwedToItsMessage(t *testing.T) {
	t.Parallel()
	w := New(10)
	for seq := uint64(1); seq <= 2; seq++ {
		require.False(t, w.Check("k", stamp(seq), idOf(seq), false, t0).Copy)
		w.Done("k", stamp(seq), t0)
	}
	w.Undo("k", stamp(1), idOf(1))
	assert.True(t, w.Check("k", stamp(1), "copy-of-1", false, t0).Copy, "a copy under another ID")
	assert.False(t, w.Check("k", stamp(1), idOf(1), false, t0).Copy, "the message itself runs again")
	w.Done("k", stamp(1), t0)
	assert.True(t, w.Check("k", stamp(1), idOf(1), false, t0).Copy, "once")
}

// TestIdle: Check reports how long the pair had been idle, from its last
// Check or Done, and nothing for a new pair.
func TestIdle(t *testing.T) {
	t.Parallel()
	w := New(10)
	assert.Zero(t, w.Check("k", stamp(1), idOf(1), false, t0).Idle, "a new pair")
	w.Done("k", stamp(1), t0.Add(time.Second))
	assert.Equal(t, 4*time.Second, w.Check("k", stamp(2), idOf(2), false, t0.Add(5*time.Second)).Idle)
}

// TestCheckFirst: CheckFirst tells the call path when a pair is new to the
// window, and only then.
func TestCheckFirst(t *testing.T) {
	t.Parallel()
	w := New(1)
	_, first := w.CheckFirst("k", stamp(5), idOf(5), false, t0)
	assert.True(t, first, "new")
	w.Done("k", stamp(5), t0)
	_, first = w.CheckFirst("k", stamp(6), idOf(6), false, t0)
	assert.False(t, first, "seen")
	w.Done("k", stamp(6), t0)
	_, first = w.CheckFirst("other", stamp(1), idOf(1), false, t0)
	assert.True(t, first, "new, taking k's place")
	_, first = w.CheckFirst("k", stamp(7), idOf(7), false, t0)
	assert.True(t, first, "forgotten, so new again")
}

// TestOlderEpochBelowTheLatest: once a later epoch has begun, the old
// epoch's numbers past the last processed were never seen here. On the
// service, whose order puts them before the new epoch, they are copies;
// redriven, or on a server that redelivers out of order, they run, once,
// and what ran before stays a copy of what it ran.
func TestOlderEpochBelowTheLatest(t *testing.T) {
	t.Parallel()
	seq := ordering.MakeSeq
	for _, tc := range []struct {
		name     string
		anyOrder bool
		redriven bool
		runs     bool
	}{
		{"service order", false, false, false},
		{"redriven", false, true, true},
		{"out of order", true, false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			w := New(10)
			if tc.anyOrder {
				w.AnyOrder()
			}
			for _, n := range []uint64{seq(3, 1), seq(3, 2), seq(4, 1), seq(4, 2)} {
				res := w.Check("k", stamp(n), idOf(n), false, t0)
				require.False(t, res.Copy, "%s", ordering.FormatSeq(n))
				w.Done("k", stamp(n), t0)
			}
			res := w.Check("k", stamp(seq(3, 3)), idOf(seq(3, 3)), tc.redriven, t0)
			assert.Equal(t, !tc.runs, res.Copy, "3.3, never seen here")
			if tc.runs {
				// Past 3.2, the last processed of its epoch, so certainly
				// never run here; out of order, the window counts every
				// number below what it knows as a possible rerun.
				assert.Equal(t, tc.anyOrder, res.Uncertain)
				w.Done("k", stamp(seq(3, 3)), t0)
				res = w.Check("k", stamp(seq(3, 3)), idOf(seq(3, 3)), tc.redriven, t0)
				assert.True(t, res.Copy, "3.3 again, once it ran")
			}
		})
	}
}

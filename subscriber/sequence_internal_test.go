package subscriber

import (
	"fmt"
	"runtime"
	"testing"

	"cloud.google.com/go/pubsub/v2"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/keyorder/keyorder/ordering"
)

// TestSequenceCheck walks one (key, producer) sequence through the cases
// sequence.go names, step by step.
func TestSequenceCheck(t *testing.T) {
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
	s := newSequences(10)
	for i, st := range steps {
		copied, _, gap := s.check("k", ordering.Stamp{Producer: "p", Seq: st.seq}, st.redriven)
		assert.Equal(t, st.copied, copied, "step %d (seq %d): %s", i, st.seq, st.comment)
		if st.gap == [2]uint64{} {
			assert.Nil(t, gap, "step %d (seq %d): %s", i, st.seq, st.comment)
		} else if assert.NotNil(t, gap, "step %d (seq %d): %s", i, st.seq, st.comment) {
			assert.Equal(t, Gap{Key: "k", Producer: "p", From: st.gap[0], To: st.gap[1], Seq: st.seq}, *gap, "step %d", i)
		}
		if st.done {
			s.done("k", ordering.Stamp{Producer: "p", Seq: st.seq})
		}
	}
}

// TestSequenceEpochs walks one (key, producer) sequence across the epochs
// of a producer that counts the key afresh (ordering.Stamp, Epochs): a
// higher epoch starts a new run from 1, a lower one is a copy, and a gap
// is reported within an epoch only.
func TestSequenceEpochs(t *testing.T) {
	t.Parallel()
	seq := ordering.MakeSeq
	type step struct {
		seq     uint64
		copied  bool
		gap     [2]uint64 // From, To; zero for none
		comment string
	}
	steps := []step{
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
	s := newSequences(10)
	for i, st := range steps {
		copied, _, gap := s.check("k", ordering.Stamp{Producer: "p", Seq: st.seq}, false)
		e, n := ordering.SplitSeq(st.seq)
		assert.Equal(t, st.copied, copied, "step %d (%d:%d): %s", i, e, n, st.comment)
		if st.gap == [2]uint64{} {
			assert.Nil(t, gap, "step %d (%d:%d): %s", i, e, n, st.comment)
		} else if assert.NotNil(t, gap, "step %d (%d:%d): %s", i, e, n, st.comment) {
			assert.Equal(t, Gap{Key: "k", Producer: "p", From: st.gap[0], To: st.gap[1], Seq: st.seq}, *gap, "step %d", i)
		}
		if !copied {
			s.done("k", ordering.Stamp{Producer: "p", Seq: st.seq})
		}
	}
}

// TestSequencesPerProducerAndKey checks that sequences of different
// producers of one key, and of different keys, do not mix.
func TestSequencesPerProducerAndKey(t *testing.T) {
	t.Parallel()
	s := newSequences(10)
	for _, id := range []seqID{{"k", "a"}, {"k", "b"}, {"j", "a"}} {
		for seq := uint64(1); seq <= 3; seq++ {
			copied, _, gap := s.check(id.key, ordering.Stamp{Producer: id.producer, Seq: seq}, false)
			require.False(t, copied, "%v %d", id, seq)
			require.Nil(t, gap, "%v %d", id, seq)
			s.done(id.key, ordering.Stamp{Producer: id.producer, Seq: seq})
		}
	}
	assert.Equal(t, 3, s.len())
}

// TestSequencesAreBounded checks that idle keys do not pile up, and that
// the least recently active sequence is the one forgotten.
func TestSequencesAreBounded(t *testing.T) {
	t.Parallel()
	const size = 100
	s := newSequences(size)
	process := func(key string, seq uint64) (bool, *Gap) {
		copied, _, gap := s.check(key, ordering.Stamp{Producer: "p", Seq: seq}, false)
		s.done(key, ordering.Stamp{Producer: "p", Seq: seq})
		return copied, gap
	}
	process("hot", 1)
	for i := 0; i < 10*size; i++ {
		process(fmt.Sprintf("idle-%d", i), 1)
		if i%(size/2) == 0 {
			process("hot", uint64(2+i/(size/2))) // active: stays remembered
		}
	}
	assert.Equal(t, size, s.len(), "the window stays at its size")
	copied, _, _ := s.check("hot", ordering.Stamp{Producer: "p", Seq: 1}, false)
	assert.True(t, copied, "a recently active sequence is remembered")
	copied, _, gap := s.check("idle-0", ordering.Stamp{Producer: "p", Seq: 1}, false)
	assert.False(t, copied, "a forgotten sequence starts over")
	assert.Nil(t, gap)
}

// TestDeliveryStamp checks what the handler sees of a stamp: a valid one
// in Producer and Seq, and out of Headers; a malformed one left in Headers.
func TestDeliveryStamp(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		attrs    map[string]string
		producer string
		seq      uint64
		headers  map[string]string
	}{
		{"stamped", map[string]string{"a": "1", ordering.StampAttribute: "0.7@p"},
			"p", 7, map[string]string{"a": "1", ordering.Header: "k"}},
		{"stamped in the older form", map[string]string{"a": "1", ordering.ProducerAttribute: "p", ordering.SeqAttribute: "7"},
			"p", 7, map[string]string{"a": "1", ordering.Header: "k"}},
		{"stamped in both forms", map[string]string{ordering.StampAttribute: "0.7@p", ordering.ProducerAttribute: "p", ordering.SeqAttribute: "7"},
			"", 0, map[string]string{ordering.StampAttribute: "0.7@p", ordering.ProducerAttribute: "p", ordering.SeqAttribute: "7", ordering.Header: "k"}},
		{"malformed new form", map[string]string{ordering.StampAttribute: "0.07@p"},
			"", 0, map[string]string{ordering.StampAttribute: "0.07@p", ordering.Header: "k"}},
		{"not stamped", map[string]string{"a": "1"},
			"", 0, map[string]string{"a": "1", ordering.Header: "k"}},
		{"no attributes", nil,
			"", 0, map[string]string{ordering.Header: "k"}},
		{"malformed", map[string]string{ordering.ProducerAttribute: "p", ordering.SeqAttribute: "07"},
			"", 0, map[string]string{ordering.ProducerAttribute: "p", ordering.SeqAttribute: "07", ordering.Header: "k"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			d := newDelivery(&pubsub.Message{ID: "1", OrderingKey: "k", Data: []byte("x"), Attributes: tc.attrs})
			assert.Equal(t, tc.producer, d.Producer)
			assert.Equal(t, tc.seq, d.Seq)
			assert.Equal(t, tc.headers, d.Headers)
		})
	}
}

// BenchmarkSequenceCheck compares, per message, the stamp check (check
// before the call, done after it) with S6's ID window (contains, then
// add), over 10,000 keys with one producer each. The memory sub-benchmarks
// report what one remembered sequence costs, and one remembered ID.
func BenchmarkSequenceCheck(b *testing.B) {
	const keys = 10_000
	names := make([]string, keys)
	ids := make([]string, keys)
	for i := range names {
		names[i] = fmt.Sprintf("customer-%05d", i)
		ids[i] = fmt.Sprintf("%016d", 1_000_000+i)
	}
	b.Run("sub=ids", func(b *testing.B) {
		// More IDs than the window holds, so that every one is new to it.
		fresh := make([]string, 4*DefaultDedupWindow)
		for i := range fresh {
			fresh[i] = fmt.Sprintf("%016d", 2_000_000+i)
		}
		p := newProcessed(DefaultDedupWindow)
		i := 0
		for b.Loop() {
			if id := fresh[i%len(fresh)]; !p.contains(id) {
				p.add(id)
			}
			i++
		}
	})
	b.Run("sub=stamps", func(b *testing.B) {
		s := newSequences(DefaultSequenceWindow)
		i := 0
		for b.Loop() {
			st := ordering.Stamp{Producer: "producer-7", Seq: uint64(i/keys + 1)}
			if copied, _, _ := s.check(names[i%keys], st, false); !copied {
				s.done(names[i%keys], st)
			}
			i++
		}
	})
	b.Run("sub=memory", func(b *testing.B) {
		for b.Loop() {
			var before, after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			s := newSequences(keys)
			p := newProcessed(keys)
			for _, k := range names {
				s.done(k, ordering.Stamp{Producer: "producer-7", Seq: 1})
			}
			runtime.GC()
			runtime.ReadMemStats(&after)
			b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/keys, "B/seq")
			runtime.ReadMemStats(&before)
			for _, id := range ids {
				p.add(id)
			}
			runtime.GC()
			runtime.ReadMemStats(&after)
			b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/keys, "B/id")
			runtime.KeepAlive(s)
			runtime.KeepAlive(p)
		}
	})
}

// TestSequenceUndo checks that a processed number whose ack failed runs
// again once, whether or not later numbers were processed since, and that
// undoing a number never processed changes nothing.
func TestSequenceUndo(t *testing.T) {
	t.Parallel()
	s := newSequences(10)
	run := func(seq uint64) (copied bool) {
		st := ordering.Stamp{Producer: "p", Seq: seq}
		copied, _, gap := s.check("k", st, false)
		require.Nil(t, gap, "seq %d", seq)
		if !copied {
			s.done("k", st)
		}
		return copied
	}
	undo := func(seq uint64) { s.undo("k", ordering.Stamp{Producer: "p", Seq: seq}) }
	for seq := uint64(1); seq <= 3; seq++ {
		require.False(t, run(seq))
	}
	undo(3) // the last processed
	assert.False(t, run(3), "3 runs again")
	assert.True(t, run(3), "once")
	undo(2) // 3 was processed after it
	assert.False(t, run(2), "2 runs again")
	assert.True(t, run(2), "once")
	undo(9) // never processed
	assert.False(t, run(4))
	assert.True(t, run(3), "3 is still processed")
	undo(1)
	undo(1)
	assert.False(t, run(1), "1 runs again")
	assert.True(t, run(1), "an ack failing twice before the message came back runs it once")
	// The ack of 5 fails while 6 runs: 5 still runs again after 6.
	require.False(t, run(5))
	st := ordering.Stamp{Producer: "p", Seq: 6}
	copied, _, _ := s.check("k", st, false)
	require.False(t, copied)
	undo(5)
	s.done("k", st)
	assert.False(t, run(5), "5 runs again after 6")
	assert.True(t, run(5), "once")
}

// TestGapString: a gap reads with its numbers as epoch.n.
func TestGapString(t *testing.T) {
	t.Parallel()
	seq := ordering.MakeSeq
	assert.Equal(t, "key k, producer p: 3.4 to 3.5 missing before 3.6 (message m)",
		Gap{Key: "k", Producer: "p", From: seq(3, 4), To: seq(3, 5), Seq: seq(3, 6), MessageID: "m"}.String())
	assert.Equal(t, "key k, producer p: 0.2 missing before 0.3 (message m)",
		Gap{Key: "k", Producer: "p", From: 2, To: 2, Seq: 3, MessageID: "m"}.String())
}

// TestSequenceOwedIsBounded checks that a sequence remembers its newest
// maxOwed runs of owed numbers, and takes the numbers of older ones for
// copies.
func TestSequenceOwedIsBounded(t *testing.T) {
	t.Parallel()
	s := newSequences(10)
	check := func(seq uint64) (copied bool, gap *Gap) {
		st := ordering.Stamp{Producer: "p", Seq: seq}
		copied, _, gap = s.check("k", st, false)
		if !copied {
			s.done("k", st)
		}
		return copied, gap
	}
	// Every other number is missing: 1, 3, 5, ... run; 2, 4, 6, ... are owed.
	const runs = maxOwed + 10
	for i := uint64(0); i <= runs; i++ {
		copied, gap := check(2*i + 1)
		require.False(t, copied)
		if i > 0 {
			require.NotNil(t, gap)
			require.Equal(t, [2]uint64{2 * i, 2 * i}, [2]uint64{gap.From, gap.To})
		}
	}
	for i := uint64(1); i <= runs; i++ {
		copied, _ := check(2 * i)
		assert.Equal(t, i <= runs-maxOwed, copied, "%d: only the newest %d missing numbers are owed", 2*i, maxOwed)
	}
}

// TestSequenceCopyRuns checks that copies come in runs, each logged once:
// the first copy after a delivery that was not one starts a run.
func TestSequenceCopyRuns(t *testing.T) {
	t.Parallel()
	s := newSequences(10)
	var firsts []bool
	for _, seq := range []uint64{1, 2, 3, 1, 2, 3, 4, 2, 3, 5} {
		st := ordering.Stamp{Producer: "p", Seq: seq}
		copied, first, _ := s.check("k", st, false)
		if copied {
			firsts = append(firsts, first)
		} else {
			s.done("k", st)
		}
	}
	assert.Equal(t, []bool{true, false, false, true, false}, firsts, "two runs: 1..3 again, and 2..3")
}

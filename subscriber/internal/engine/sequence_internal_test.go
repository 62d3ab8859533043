package engine

import (
	"fmt"
	"runtime"
	"testing"
	"time"

	"cloud.google.com/go/pubsub/v2"
	"github.com/stretchr/testify/assert"

	"github.com/keyorder/keyorder/ordering"
	"github.com/keyorder/keyorder/subscriber/internal/seqwindow"
)

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
		fresh := make([]string, 4*testDedupWindow)
		for i := range fresh {
			fresh[i] = fmt.Sprintf("%016d", 2_000_000+i)
		}
		p := newProcessed(testDedupWindow)
		i := 0
		for b.Loop() {
			if id := fresh[i%len(fresh)]; !p.contains(id) {
				p.add(id)
			}
			i++
		}
	})
	b.Run("sub=stamps", func(b *testing.B) {
		s := seqwindow.New(testSequenceWindow)
		i := 0
		for b.Loop() {
			st := ordering.Stamp{Producer: "producer-7", Seq: uint64(i/keys + 1)}
			if !s.Check(names[i%keys], st, "", false, time.Time{}).Copy {
				s.Done(names[i%keys], st, time.Time{})
			}
			i++
		}
	})
	b.Run("sub=memory", func(b *testing.B) {
		for b.Loop() {
			var before, after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			s := seqwindow.New(keys)
			p := newProcessed(keys)
			for _, k := range names {
				s.Done(k, ordering.Stamp{Producer: "producer-7", Seq: 1}, time.Time{})
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

// TestGapString: a gap reads with its numbers as epoch.n.
func TestGapString(t *testing.T) {
	t.Parallel()
	seq := ordering.MakeSeq
	assert.Equal(t, "key k, producer p: 3.4 to 3.5 missing before 3.6 (message m)",
		Gap{Key: "k", Producer: "p", From: seq(3, 4), To: seq(3, 5), Seq: seq(3, 6), MessageID: "m"}.String())
	assert.Equal(t, "key k, producer p: 0.2 missing before 0.3 (message m)",
		Gap{Key: "k", Producer: "p", From: 2, To: 2, Seq: 3, MessageID: "m"}.String())
}

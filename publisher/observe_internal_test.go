package publisher

import (
	"log/slog"
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
)

// BenchmarkRecorder measures what the recorder adds to a message of a key
// with the default provider, the global one with nothing installed:
// reading the clock in Publish, the rate check in enqueue, and the count
// and duration of its settling; settleDone reads the clock once per
// batch, which is left out.
func BenchmarkRecorder(b *testing.B) {
	o := newRecorder(&config{logger: slog.New(slog.DiscardHandler)}, "projects/p/topics/t")
	o.limit = math.MaxInt64 // counting, never warned
	var kr keyRate
	r := &Result{size: 200}
	settledAt := o.now()
	b.ReportAllocs()
	for b.Loop() {
		r.start = o.now()
		o.account("k", &kr, r)
		o.settled(r, outPublished, settledAt)
	}
}

// TestRecorderAllocs checks that a measurement allocates nothing with the
// default provider.
func TestRecorderAllocs(t *testing.T) {
	o := newRecorder(&config{}, "projects/p/topics/t")
	var kr keyRate
	r := &Result{size: 200}
	allocs := testing.AllocsPerRun(100, func() {
		r.start = o.now()
		o.account("k", &kr, r)
		o.settled(r, outPublished, o.now())
	})
	assert.Zero(t, allocs)
}

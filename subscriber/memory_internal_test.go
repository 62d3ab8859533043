package subscriber

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

func TestHolds(t *testing.T) {
	t.Parallel()
	var h holds
	now := time.Unix(1000, 0)
	assert.True(t, h.admit("k", "m1", now), "a key that is not held runs")

	h.add("k", "m2", now.Add(time.Minute), now)
	assert.False(t, h.admit("k", "m3", now), "later messages wait for the failed one")
	assert.False(t, h.admit("k", "m3", now.Add(time.Minute)), "until the wait is over")
	assert.True(t, h.admit("other", "m9", now), "other keys go on")
	assert.True(t, h.admit("k", "m2", now), "the failed message itself releases the key")
	assert.True(t, h.admit("k", "m3", now))
	assert.Zero(t, h.len(), "a released key leaves nothing behind")

	h.add("k", "m2", now.Add(time.Minute), now)
	assert.True(t, h.admit("k", "m3", now.Add(time.Minute+1)), "the hold lapses")
	assert.Zero(t, h.len())
}

// TestHoldsSweepExpired checks that holds of keys never seen again do not
// pile up: adding holds sweeps the expired ones as the map grows.
func TestHoldsSweepExpired(t *testing.T) {
	t.Parallel()
	var h holds
	now := time.Unix(1000, 0)
	for i := 0; i < 100_000; i++ {
		at := now.Add(time.Duration(i) * time.Millisecond)
		h.add(fmt.Sprintf("key-%d", i), "m", at.Add(time.Second), at)
	}
	// Holds last a second and arrive one a millisecond: about a thousand
	// are live at the end, and the sweep keeps the map within a small
	// multiple of that.
	assert.Less(t, h.len(), 4_000)
}

func TestProcessedWindow(t *testing.T) {
	t.Parallel()
	p := newProcessed(3)
	for _, id := range []string{"a", "b", "c"} {
		p.add(id)
	}
	assert.True(t, p.contains("a"))
	p.add("b") // already there: no eviction
	assert.True(t, p.contains("a"))
	p.add("d") // evicts the oldest, a
	assert.False(t, p.contains("a"))
	for _, id := range []string{"b", "c", "d"} {
		assert.True(t, p.contains(id), id)
	}
	p.add("e")
	p.add("f")
	p.add("g")
	assert.Len(t, p.ids, 3, "the window stays at its size")
	assert.False(t, p.contains("d"))

	off := newProcessed(0)
	off.add("a")
	assert.False(t, off.contains("a"), "a zero window remembers nothing")
}

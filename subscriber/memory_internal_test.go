package subscriber

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
)

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
	assert.Equal(t, 3, p.w.len(), "the window stays at its size")
	assert.False(t, p.contains("d"))

	off := newProcessed(0)
	off.add("a")
	assert.False(t, off.contains("a"), "a zero window remembers nothing")
}

func TestAttemptsOutliveDeliveries(t *testing.T) {
	t.Parallel()
	a := newAttempts()
	assert.Zero(t, a.prior("m"), "a message that never failed is not remembered")
	assert.Equal(t, 1, a.fail("m", 1, true))
	assert.Equal(t, 1, a.fail("m", 2, false), "a RetryAfter call does not count")
	assert.Equal(t, 2, a.fail("m", 3, true))
	// A later delivery of m starts from what was remembered.
	assert.Equal(t, attempt{calls: 3, failures: 2}, a.prior("m"))
	a.succeed("m")
	assert.Zero(t, a.prior("m"), "success forgets the message")
	assert.Zero(t, a.w.len())
}

// TestAttemptsAreBounded checks that failing messages that never come back
// do not pile up: the window forgets the oldest.
func TestAttemptsAreBounded(t *testing.T) {
	t.Parallel()
	a := newAttempts()
	for i := 0; i < 3*attemptWindow; i++ {
		a.fail(fmt.Sprintf("m-%d", i), 1, true)
	}
	assert.Equal(t, attemptWindow, a.w.len())
	assert.Zero(t, a.prior("m-0"), "the oldest is forgotten")
	assert.Equal(t, 1, a.prior(fmt.Sprintf("m-%d", 3*attemptWindow-1)).failures)
}

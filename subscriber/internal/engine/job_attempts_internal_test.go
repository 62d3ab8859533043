package engine

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
)

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
	assert.Zero(t, a.w.Len())
}

// TestAttemptsAreBounded checks that failing messages that never come back
// do not pile up: the window forgets the oldest.
func TestAttemptsAreBounded(t *testing.T) {
	t.Parallel()
	a := newAttempts()
	for i := 0; i < 3*attemptWindow; i++ {
		a.fail(fmt.Sprintf("m-%d", i), 1, true)
	}
	assert.Equal(t, attemptWindow, a.w.Len())
	assert.Zero(t, a.prior("m-0"), "the oldest is forgotten")
	assert.Equal(t, 1, a.prior(fmt.Sprintf("m-%d", 3*attemptWindow-1)).failures)
}

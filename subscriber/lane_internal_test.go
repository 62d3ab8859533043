package subscriber

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

// TestHeldKeyQueued checks that HeldKey.Queued counts the deliveries behind
// the failed message, whether the message waits at the head of its lane
// for a retry or runs.
func TestHeldKeyQueued(t *testing.T) {
	t.Parallel()
	failed, next := &job{d: Delivery{ID: "m1"}}, &job{d: Delivery{ID: "m2"}}
	l := &lane{key: "k", trouble: &trouble{id: "m1"}}

	l.queue.Push(failed)
	l.queue.Push(next)
	assert.Equal(t, 1, l.heldKey().Queued, "waiting for its retry at the head")

	l.queue.Pop()
	l.running = failed
	assert.Equal(t, 1, l.heldKey().Queued, "running")

	l.running = nil
	l.trouble.held = true
	assert.Equal(t, 1, l.heldKey().Queued, "held, with a delivery kept")
}

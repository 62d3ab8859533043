package subscriber

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

// TestHeldKeyQueued checks that HeldKey.Queued counts the key's other
// deliveries, whether the failed message waits for a retry, at the head
// of its lane or behind an earlier message of its producer, or runs.
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

	l.trouble.held = false
	l.queue.Pop()
	earlier := &job{d: Delivery{ID: "m0"}}
	l.queue.Push(earlier)
	l.queue.Push(failed)
	l.queue.Push(next)
	assert.Equal(t, 2, l.heldKey().Queued, "waiting for its retry behind an earlier message of its producer")
}

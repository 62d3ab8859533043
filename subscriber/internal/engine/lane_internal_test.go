package engine

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// TestHeldKeyQueued checks that HeldKey.Queued counts the key's other
// deliveries, whether the failed message waits for a retry, at the head
// of its lane or behind an earlier message of its producer, or runs.
func TestHeldKeyQueued(t *testing.T) {
	t.Parallel()
	failed, next := &Job{D: Delivery{ID: "m1"}}, &Job{D: Delivery{ID: "m2"}}
	l := &Lane{Key: "k", trouble: &trouble{id: "m1"}}

	l.Queue.Push(failed)
	l.Queue.Push(next)
	assert.Equal(t, 1, l.heldKey().Queued, "waiting for its retry at the head")

	l.Queue.Pop()
	l.Running = failed
	assert.Equal(t, 1, l.heldKey().Queued, "running")

	l.Running = nil
	l.trouble.held = true
	assert.Equal(t, 1, l.heldKey().Queued, "held, with a delivery kept")

	l.trouble.held = false
	l.Queue.Pop()
	earlier := &Job{D: Delivery{ID: "m0"}}
	l.Queue.Push(earlier)
	l.Queue.Push(failed)
	l.Queue.Push(next)
	assert.Equal(t, 2, l.heldKey().Queued, "waiting for its retry behind an earlier message of its producer")
}

// TestPlaceOrdersAProducersNumbers: place keeps each producer's numbers
// in order among the queued deliveries, moving a delivery no further
// forward than its producer's higher numbers; unstamped deliveries and
// other producers keep their places. putBack returns a delivery to the
// head, behind its producer's lower numbers.
func TestPlaceOrdersAProducersNumbers(t *testing.T) {
	t.Parallel()
	l := &Lane{r: &Engine{sub: Facts{Ordered: true}, anyOrder: true}, Key: "k"}
	mk := func(producer string, seq uint64) *Job {
		return &Job{D: Delivery{ID: fmt.Sprint(producer, seq), Producer: producer, Seq: seq}}
	}
	now := time.Now()
	for _, j := range []*Job{mk("a", 5), mk("", 0), mk("b", 2), mk("a", 7), mk("a", 3), mk("b", 1), mk("a", 6), mk("a", 9)} {
		l.place(j, now)
	}
	l.putBack(mk("a", 4))
	l.putBack(mk("b", 3))
	var got []string
	for j, ok := l.Queue.Pop(); ok; j, ok = l.Queue.Pop() {
		got = append(got, j.D.ID)
	}
	assert.Equal(t, []string{"a3", "a4", "a5", "0", "b1", "b2", "b3", "a6", "a7", "a9"}, got)

	for name, r := range map[string]*Engine{
		"an unordered subscription":                   {sub: Facts{}, anyOrder: true},
		"the service, where a lower number is a copy": {sub: Facts{Ordered: true}},
	} {
		l := &Lane{r: r, Key: "k"}
		l.place(mk("a", 5), now)
		l.place(mk("a", 3), now)
		l.putBack(mk("a", 4))
		assert.Equal(t, "a4", l.Queue.At(0).D.ID, "%s: putBack puts at the head", name)
		assert.Equal(t, "a5", l.Queue.At(1).D.ID, "%s keeps arrival order", name)
	}
}

// BenchmarkPlace is the cost of queueing a delivery on a lane that holds
// depth of its key's deliveries, in order as the service sends them:
// stamped, where place looks at the last queued, and unstamped, where it
// appends.
func BenchmarkPlace(b *testing.B) {
	for _, depth := range []int{1, 1000} {
		for _, tc := range []struct {
			name     string
			producer string
		}{{"unstamped", ""}, {"stamped", "p"}} {
			b.Run(fmt.Sprintf("%s/depth=%d", tc.name, depth), func(b *testing.B) {
				l := &Lane{r: &Engine{sub: Facts{Ordered: true}, anyOrder: true}, Key: "k"}
				jobs := make([]Job, depth+b.N)
				for i := range jobs {
					jobs[i].D = Delivery{Producer: tc.producer, Seq: uint64(i + 1)}
				}
				now := time.Now()
				for i := range depth {
					l.place(&jobs[i], now)
				}
				b.ReportAllocs()
				b.ResetTimer()
				for i := range b.N {
					l.place(&jobs[depth+i], now)
					l.Queue.Pop()
				}
			})
		}
	}
}

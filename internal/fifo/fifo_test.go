package fifo_test

import (
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/keyorder/keyorder/internal/fifo"
)

func drain(q *fifo.Queue[int]) []int {
	var out []int
	for v, ok := q.Pop(); ok; v, ok = q.Pop() {
		out = append(out, v)
	}
	return out
}

func TestQueueKeepsOrderAcrossGrowthAndWrap(t *testing.T) {
	t.Parallel()
	var q fifo.Queue[int]
	next, want := 0, []int{}
	// Interleave pushes and pops so that head wraps around the buffer
	// while it grows.
	for round := 0; round < 50; round++ {
		for i := 0; i < round%7+1; i++ {
			q.Push(next)
			next++
		}
		if v, ok := q.Pop(); ok {
			want = append(want, v)
		}
	}
	got := append(want, drain(&q)...)
	require.Len(t, got, next)
	for i, v := range got {
		require.Equal(t, i, v)
	}
	_, ok := q.Pop()
	assert.False(t, ok)
}

func TestQueuePushFront(t *testing.T) {
	t.Parallel()
	var q fifo.Queue[int]
	q.Push(2)
	q.Push(3)
	q.PushFront(1)
	q.PushFront(0)
	for i := 4; i < 10; i++ { // grow with head not at 0
		q.Push(i)
	}
	assert.Equal(t, 0, q.At(0))
	assert.Equal(t, 9, q.At(q.Len()-1))
	assert.Equal(t, []int{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}, drain(&q))
	assert.Panics(t, func() { q.At(0) })
}

func TestQueueRemoveAndTruncate(t *testing.T) {
	t.Parallel()
	var q fifo.Queue[int]
	for i := 0; i < 10; i++ {
		q.Push(i)
	}
	q.Pop() // move head off 0
	odd := q.RemoveFunc(func(v int) bool { return v%2 == 1 }, nil)
	assert.Equal(t, []int{1, 3, 5, 7, 9}, odd)
	tail := q.Truncate(2, nil)
	assert.Equal(t, []int{6, 8}, tail)
	assert.Equal(t, []int{2, 4}, drain(&q))

	q.Push(1)
	assert.Equal(t, []int{1}, q.Truncate(0, nil))
	assert.Zero(t, q.Len())
	assert.Empty(t, q.Truncate(5, nil), "past the end removes nothing")
}

func TestQueueShrink(t *testing.T) {
	t.Parallel()
	var q fifo.Queue[int]
	for i := 0; i < 100; i++ {
		q.Push(i)
	}
	q.Shrink(8)
	assert.Equal(t, 100, q.Len(), "a queue with items keeps them")
	drain(&q)
	q.Shrink(8)
	q.Push(7)
	assert.Equal(t, []int{7}, drain(&q), "usable after shrinking")
}

// TestQueueInsert checks Insert against a slice, at every position,
// while the buffer wraps and grows, mixed with pushes and pops at both
// ends.
func TestQueueInsert(t *testing.T) {
	t.Parallel()
	var q fifo.Queue[int]
	var model []int
	rng := rand.New(rand.NewPCG(1, 2))
	for step := range 2000 {
		switch op := rng.IntN(5); {
		case op <= 1 && len(model) > 0:
			v, ok := q.Pop()
			require.True(t, ok)
			require.Equal(t, model[0], v, "step %d", step)
			model = model[1:]
		case op == 2:
			q.PushFront(step)
			model = append([]int{step}, model...)
		default:
			i := rng.IntN(len(model) + 1)
			q.Insert(i, step)
			model = append(model[:i], append([]int{step}, model[i:]...)...)
		}
		got := make([]int, q.Len())
		for i := range got {
			got[i] = q.At(i)
		}
		require.Equal(t, model, got, "step %d", step)
	}
	assert.Panics(t, func() { q.Insert(q.Len()+1, 0) })
	assert.Panics(t, func() { q.Insert(-1, 0) })
}

package window_test

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/keyorder/keyorder/internal/window"
)

func put(w *window.Window[struct{}], ids ...string) {
	for _, id := range ids {
		w.Update(id, func(struct{}) struct{} { return struct{}{} })
	}
}

func has(w *window.Window[struct{}], id string) bool {
	_, ok := w.Get(id)
	return ok
}

func TestWindowForgetsTheOldest(t *testing.T) {
	t.Parallel()
	w := window.New[struct{}](3)
	put(w, "a", "b", "c")
	assert.True(t, has(w, "a"))
	put(w, "b") // already there: no eviction
	assert.True(t, has(w, "a"))
	put(w, "d") // evicts the oldest, a
	assert.False(t, has(w, "a"))
	for _, id := range []string{"b", "c", "d"} {
		assert.True(t, has(w, id), id)
	}
	put(w, "e", "f", "g")
	assert.Equal(t, 3, w.Len(), "the window stays at its size")
	assert.False(t, has(w, "d"))
}

func TestWindowOff(t *testing.T) {
	t.Parallel()
	for name, w := range map[string]*window.Window[int]{"size 0": window.New[int](0), "zero value": {}} {
		t.Run(name, func(t *testing.T) {
			assert.Equal(t, 1, w.Update("a", func(v int) int { return v + 1 }), "f still sees the zero value")
			_, ok := w.Get("a")
			assert.False(t, ok, "remembers nothing")
			w.Delete("a")
			assert.Zero(t, w.Len())
		})
	}
}

func TestWindowUpdateAndDelete(t *testing.T) {
	t.Parallel()
	w := window.New[int](2)
	inc := func(v int) int { return v + 1 }
	assert.Equal(t, 1, w.Update("a", inc))
	assert.Equal(t, 2, w.Update("a", inc), "an update starts from the value remembered")
	w.Delete("a")
	_, ok := w.Get("a")
	assert.False(t, ok)
	assert.Zero(t, w.Len())
	assert.Equal(t, 1, w.Update("a", inc), "a deleted ID starts again from zero")
	// a's first slot is still in the ring, so the first eviction forgets
	// a, put again, early: memory is only bounded sooner.
	w.Update("b", inc)
	_, ok = w.Get("a")
	assert.False(t, ok)
	assert.Equal(t, 1, w.Len())
	w.Update("c", inc)
	assert.Equal(t, 2, w.Len())
}

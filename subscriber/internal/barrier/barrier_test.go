package barrier

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestFreshness: a delivery waits for a marker begun after it arrived,
// unless a marker sent within the window has come back; the window is
// measured on the barrier's own clock.
func TestFreshness(t *testing.T) {
	t.Parallel()
	const window = time.Second
	b := New(window)
	now := time.Now()
	fence := b.Arrived(now)
	require.Equal(t, uint64(1), fence, "nothing came back yet: wait for the first marker")
	var woken atomic.Int32
	require.True(t, b.Wait(fence, func() { woken.Add(1) }))
	select {
	case <-b.Kick():
	default:
		t.Fatal("a waiter kicks the loop")
	}
	sent := 0
	b.Round(func() bool { sent++; return true })
	assert.Equal(t, 1, sent, "one marker frees the waiter, and no refresh is due yet")
	assert.EqualValues(t, 1, woken.Load())
	assert.False(t, b.Wait(fence, func() { t.Error("woken for a passed fence") }), "a passed fence needs no wait")

	assert.Zero(t, b.Arrived(time.Now()), "a marker came back within the window: the view is fresh")
	assert.Equal(t, uint64(2), b.Arrived(time.Now().Add(2*window)), "past the window it is not")
}

// TestAwait: a caller's wait ends with the marker it waits for, or at once
// for one passed.
func TestAwait(t *testing.T) {
	t.Parallel()
	b := New(time.Second)
	done := b.Await(b.Want())
	select {
	case <-done:
		t.Fatal("no marker came back yet")
	default:
	}
	b.Round(func() bool { return true })
	select {
	case <-done:
	default:
		t.Fatal("the marker came back")
	}
	select {
	case <-b.Await(1):
	default:
		t.Fatal("a passed marker needs no wait")
	}
}

// TestRoundStops: a send that gives up, as when the loop stops, ends the
// round, freeing nobody.
func TestRoundStops(t *testing.T) {
	t.Parallel()
	b := New(time.Second)
	var woken atomic.Bool
	require.True(t, b.Wait(b.Arrived(time.Now()), func() { woken.Store(true) }))
	sent := 0
	b.Round(func() bool { sent++; return false })
	assert.Equal(t, 1, sent)
	assert.False(t, woken.Load())
}

// TestRefresh: while new keys arrive, the loop is to look again within a
// quarter window; once they stop for a window, not at all.
func TestRefresh(t *testing.T) {
	t.Parallel()
	const window = 400 * time.Millisecond
	b := New(window)
	now := time.Now()
	b.Arrived(now)
	d, ok := b.NextRefresh(now)
	require.True(t, ok, "new keys arrived")
	assert.LessOrEqual(t, d, window/4)
	assert.Positive(t, d)
	_, ok = b.NextRefresh(now.Add(2 * window))
	assert.False(t, ok, "no new key for a window: no refresh")
}

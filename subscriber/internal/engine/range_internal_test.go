package engine

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// TestCaughtUpRule checks Replay's rule for the end on a made-up clock:
// nothing held, and quiet since the last activity.
func TestCaughtUpRule(t *testing.T) {
	t.Parallel()
	const quiet = time.Second
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	idle := func() bool { return true }
	busy := func() bool { return false }
	for _, tc := range []struct {
		name     string
		activity []time.Duration // after t0
		at       time.Duration
		idle     func() bool
		want     bool
	}{
		{"quiet and idle", nil, quiet, idle, true},
		{"not quiet yet", nil, quiet - time.Nanosecond, idle, false},
		{"quiet but busy", nil, 10 * quiet, busy, false},
		{"an arrival restarts the quiet period", []time.Duration{quiet / 2}, quiet, idle, false},
		{"quiet after the last arrival", []time.Duration{quiet / 2, quiet}, 2 * quiet, idle, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := NewRange(time.Time{}, time.Time{}, quiet)
			c.Active(t0)
			for _, a := range tc.activity {
				c.Active(t0.Add(a))
			}
			assert.Equal(t, tc.want, c.Done(t0.Add(tc.at), tc.idle))
		})
	}
}

// TestCaughtUpAsksIdleFirst checks the order that makes the rule safe
// against a message arriving while it is evaluated: an arrival during
// idle() must count.
func TestCaughtUpAsksIdleFirst(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	c := NewRange(time.Time{}, time.Time{}, time.Second)
	c.Active(t0)
	now := t0.Add(time.Hour)
	arriving := func() bool {
		c.Active(now) // a message arrives, and is queued, after idle looked
		return true
	}
	assert.False(t, c.Done(now, arriving))
}

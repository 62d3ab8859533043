package engine

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// TestLogLimit: a pair logs once per period, then tells how many lines it
// held back; memory stays within maxLimitPairs however many pairs log,
// and all pairs together log at most limitBurst lines a minute.
func TestLogLimit(t *testing.T) {
	t.Parallel()
	l := newLogLimit(time.Hour)
	ok, since := l.allow("k", "p")
	assert.True(t, ok)
	assert.Zero(t, since)
	for range 5 {
		ok, _ = l.allow("k", "p")
		assert.False(t, ok, "within the hour")
	}
	l.m[limitPair{"k", "p"}].last = time.Now().Add(-time.Hour)
	ok, since = l.allow("k", "p")
	assert.True(t, ok, "the hour is over")
	assert.EqualValues(t, 5, since)

	logged := 0
	for i := range 10 * maxLimitPairs {
		if ok, _ := l.allow(fmt.Sprint("key-", i), "p"); ok {
			logged++
		}
		assert.LessOrEqual(t, len(l.m), maxLimitPairs)
	}
	assert.Equal(t, limitBurst-2, logged, "the minute's budget, less the two lines of (k, p)")
	l.minute = time.Now().Add(-time.Minute)
	for i := range 3 * maxLimitPairs {
		l.allow(fmt.Sprint("other-", i), "p")
		l.minute = time.Now().Add(-time.Minute) // a new minute each time: only the bound on pairs holds
		assert.LessOrEqual(t, len(l.m), maxLimitPairs)
	}
}

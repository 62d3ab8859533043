package backoff_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/keyorder/keyorder/internal/backoff"
)

func TestDoubling(t *testing.T) {
	const first, most = 100 * time.Millisecond, time.Second
	for n, want := range map[int]time.Duration{
		0: first, 1: first, 2: 200 * time.Millisecond, 4: 800 * time.Millisecond,
		5: most, 6: most, 1000: most,
	} {
		assert.Equal(t, want, backoff.Doubling(first, most, n), "n=%d", n)
	}
	assert.Equal(t, 2*time.Second, backoff.Doubling(3*time.Second, 2*time.Second, 1), "never over most")
}

func TestPublish(t *testing.T) {
	for n, want := range map[int]time.Duration{1: 100 * time.Millisecond, 2: 200 * time.Millisecond, 5: 1600 * time.Millisecond, 6: 2 * time.Second, 100: 2 * time.Second} {
		assert.Equal(t, want, backoff.Publish(n), "n=%d", n)
	}
}

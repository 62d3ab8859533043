package outbox

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/keyorder/keyorder/internal/leaktest"
	"github.com/keyorder/keyorder/ordering"
)

func TestMain(m *testing.M) { leaktest.VerifyTestMain(m) }

func TestOptionsRefuseOutOfRange(t *testing.T) {
	t.Parallel()
	var c config
	for _, n := range []int{0, -1, MaxShards + 1} {
		assert.ErrorIs(t, WithShards(n)(&c), ErrInvalidConfig, n)
	}
	require.NoError(t, WithShards(MaxShards)(&c))
	rc := defaultRelayConfig()
	bad := []RelayOption{
		WithBatchSize(0), WithBatchSize(10_001),
		WithPollInterval(0), WithPollInterval(2 * time.Minute),
		WithLease(50 * time.Millisecond), WithLease(time.Hour),
		WithDrainTimeout(-1), WithDrainTimeout(time.Hour),
		WithMeterProvider(nil), WithLogger(nil),
	}
	for i, opt := range bad {
		assert.ErrorIs(t, opt(&rc), ErrInvalidConfig, i)
	}
	_, err := New(context.Background(), nil, SQLite)
	assert.ErrorIs(t, err, ErrInvalidConfig)
	_, err = NewRelay(nil, nil)
	assert.ErrorIs(t, err, ErrInvalidConfig)
}

func TestBackoffDoublesToItsBound(t *testing.T) {
	t.Parallel()
	assert.Equal(t, 100*time.Millisecond, backoff(1))
	assert.Equal(t, 200*time.Millisecond, backoff(2))
	assert.Equal(t, 6400*time.Millisecond, backoff(7))
	assert.Equal(t, 10*time.Second, backoff(8))
	assert.Equal(t, 10*time.Second, backoff(1000))
}

// TestHeadersRoundTrip checks that the headers the relay publishes are
// the message's, less the key's header, with room for the stamp.
func TestHeadersRoundTrip(t *testing.T) {
	t.Parallel()
	for _, h := range []map[string]string{nil, {}, {ordering.Header: "k"}, {"a": "1", "é": "\u2028\"", ordering.Header: "k"}} {
		enc, err := encodeHeaders(h)
		require.NoError(t, err)
		dec, err := decodeHeaders(enc)
		require.NoError(t, err)
		want := map[string]string{}
		for k, v := range h {
			if k != ordering.Header {
				want[k] = v
			}
		}
		assert.Equal(t, want, dec)
	}
}

func TestInList(t *testing.T) {
	t.Parallel()
	assert.Equal(t, "shard IN (3)", inList([]int{3}))
	assert.Equal(t, "shard IN (1,2)", inList([]int{1, 2}))
}

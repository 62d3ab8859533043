package window_test

import (
	"crypto/sha256"
	"encoding/hex"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/keyorder/keyorder/internal/window"
)

// TestWindowKeepsBoundedBytes: a full window of 1 MB IDs holds about what
// a window of short IDs holds, not the IDs themselves.
func TestWindowKeepsBoundedBytes(t *testing.T) {
	const size, idBytes = 64, 1 << 20
	w := window.New[struct{}](size)
	before := heap()
	for i := range size {
		id := strings.Repeat("x", idBytes-8) + strconv.Itoa(10_000_000+i)
		put(w, id)
	}
	kept := int64(heap()) - int64(before)
	assert.Less(t, kept, int64(size*1024), "%d bytes kept for %d IDs of %d bytes", kept, size, idBytes)
	assert.Equal(t, size, w.Len())
	runtime.KeepAlive(w)
}

// heap returns the bytes of live heap objects, after a collection.
func heap() uint64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// TestWindowNeverTakesAnIDForAnother: at the edge of the raw length and one
// past it, every ID is its own entry (S6): long IDs that share a prefix,
// and the short ID that spells a long one's digest.
func TestWindowNeverTakesAnIDForAnother(t *testing.T) {
	t.Parallel()
	w := window.New[struct{}](100)
	prefix := strings.Repeat("p", window.MaxRawID)
	edge := strings.Repeat("e", window.MaxRawID)
	long, other := prefix+"-1", prefix+"-2"
	put(w, edge, long)
	assert.True(t, has(w, edge), "an ID of MaxRawID bytes")
	assert.True(t, has(w, long), "an ID one past it")
	assert.False(t, has(w, other), "another long ID with the same prefix")
	assert.False(t, has(w, edge[:len(edge)-1]))
	assert.False(t, has(w, prefix), "the long ID's first MaxRawID bytes")

	sum := sha256.Sum256([]byte(long))
	for _, spelled := range []string{"#" + hex.EncodeToString(sum[:]), hex.EncodeToString(sum[:]), string(sum[:])} {
		assert.False(t, has(w, spelled), "%q spells the long ID's digest", spelled)
	}
	w.Delete(long)
	assert.False(t, has(w, long))
	require.Equal(t, 1, w.Len())
}

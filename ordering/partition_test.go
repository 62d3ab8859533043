package ordering_test

import (
	"fmt"
	"hash/fnv"
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/keyorder/keyorder/ordering"
)

// The golden vectors pin Partition and Hash: a change here moves keys to
// other workers in every deployment, which breaks per-key order while old
// and new processes run side by side (S3).
var golden = []struct {
	key            string
	hash           uint64
	p4, p16, p1000 int
}{
	{"", 0xefd01f60ba992926, 3, 14, 936},
	{"a", 0x82a2a958a9bece5b, 2, 8, 510},
	{"customer-1", 0xadf92b537b08cdda, 2, 10, 679},
	{"customer-2", 0x5b55fd5d4645d8f3, 1, 5, 356},
	{"customer-42", 0xe5c7993df9de03b9, 3, 14, 897},
	{"order-1", 0x491b422e3af0d9a5, 1, 4, 285},
	{"order-2", 0xaaca0c2aeae39bab, 2, 10, 667},
	{"日本語", 0xe11518acc326d0e8, 3, 14, 879},
	{"partition-key", 0xa96446c67ed131a3, 2, 10, 661},
}

func TestPartitionGoldenVectors(t *testing.T) {
	t.Parallel()
	for _, g := range golden {
		assert.Equal(t, g.hash, ordering.Hash(g.key), "Hash(%q)", g.key)
		assert.Equal(t, g.p4, ordering.Partition(g.key, 4), "Partition(%q, 4)", g.key)
		assert.Equal(t, g.p16, ordering.Partition(g.key, 16), "Partition(%q, 16)", g.key)
		assert.Equal(t, g.p1000, ordering.Partition(g.key, 1000), "Partition(%q, 1000)", g.key)
		assert.Equal(t, 0, ordering.Partition(g.key, 1), "Partition(%q, 1)", g.key)
	}
}

// TestHashIsFNV1aThenFmix64 checks the documented construction against the
// standard library's FNV-1a and an independent fmix64, so the doc comment
// cannot drift from the code.
func TestHashIsFNV1aThenFmix64(t *testing.T) {
	t.Parallel()
	fmix64 := func(k uint64) uint64 {
		k ^= k >> 33
		k *= 0xff51afd7ed558ccd
		k ^= k >> 33
		k *= 0xc4ceb9fe1a85ec53
		k ^= k >> 33
		return k
	}
	for i := 0; i < 1000; i++ {
		key := fmt.Sprintf("key-%d", i)
		h := fnv.New64a()
		_, _ = h.Write([]byte(key))
		require.Equal(t, fmix64(h.Sum64()), ordering.Hash(key), key)
	}
}

func TestPartitionPanicsOnBadN(t *testing.T) {
	t.Parallel()
	assert.Panics(t, func() { ordering.Partition("k", 0) })
	assert.Panics(t, func() { ordering.Partition("k", -1) })
}

// TestPartitionSpreadsEvenly runs a chi-square test over sequential keys,
// the usual shape of real keys ("customer-1", "customer-2", ...), for
// several partition counts.
func TestPartitionSpreadsEvenly(t *testing.T) {
	t.Parallel()
	const keys = 200_000
	for _, n := range []int{2, 3, 4, 7, 16, 64, 100} {
		counts := make([]int, n)
		for i := 0; i < keys; i++ {
			counts[ordering.Partition(fmt.Sprintf("customer-%d", i), n)]++
		}
		expected := float64(keys) / float64(n)
		var chi2 float64
		for _, c := range counts {
			d := float64(c) - expected
			chi2 += d * d / expected
		}
		// For k = n-1 degrees of freedom, chi2 above k + 5*sqrt(2k) is
		// beyond the 99.99th percentile for uniform data.
		k := float64(n - 1)
		limit := k + 5*math.Sqrt(2*k)
		assert.Less(t, chi2, limit, "n=%d counts=%v", n, counts)
	}
}

func FuzzPartition(f *testing.F) {
	f.Add("customer-1", 4)
	f.Add("", 1)
	f.Add("\xff\x00", 1<<30)
	f.Fuzz(func(t *testing.T, key string, n int) {
		if n < 1 {
			n = -n%1000 + 1
		}
		p := ordering.Partition(key, n)
		require.GreaterOrEqual(t, p, 0)
		require.Less(t, p, n)
		require.Equal(t, p, ordering.Partition(key, n), "not deterministic")
	})
}

func BenchmarkPartition(b *testing.B) {
	key := "customer-1234567"
	for b.Loop() {
		_ = ordering.Partition(key, 64)
	}
}

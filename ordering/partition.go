package ordering

import "math/bits"

// Partition returns the partition in [0, n) that key belongs to. It panics
// if n < 1, as a partition count below one is a programming error.
//
// The mapping is pinned: the same key and n give the same partition in every
// process, on every platform and in every release of keyorder, so that a key
// keeps one worker (S3). Changing it would be a breaking change, and golden
// vectors in the tests hold it in place.
//
// The hash is 64-bit FNV-1a over the key's bytes, followed by the 64-bit
// finaliser of MurmurHash3 (fmix64) so that keys differing only in their
// last bytes, such as "customer-41" and "customer-42", spread as well as
// random keys. The 64-bit hash h is reduced to [0, n) by taking the high
// 64 bits of h*n (Lemire's multiply-shift), which avoids the cost of a
// division and is as even as the hash. Partition does not allocate and costs
// about 1 ns per key byte.
//
// Changing n moves most keys to other partitions, as with any hash
// partitioning: keys in flight while a pool is resized may run out of order.
func Partition(key string, n int) int {
	if n < 1 {
		panic("ordering: Partition with n < 1")
	}
	hi, _ := bits.Mul64(Hash(key), uint64(n))
	return int(hi)
}

// FNV-1a 64-bit parameters (http://www.isthe.com/chongo/tech/comp/fnv/).
const (
	fnvOffset64 = 14695981039346656037
	fnvPrime64  = 1099511628211
)

// Hash returns the pinned 64-bit hash that [Partition] is built on: FNV-1a
// 64 of the key's bytes, finished with MurmurHash3's fmix64. It is exported
// so that other systems can reproduce keyorder's partitioning.
func Hash(key string) uint64 {
	h := uint64(fnvOffset64)
	for i := 0; i < len(key); i++ {
		h ^= uint64(key[i])
		h *= fnvPrime64
	}
	// fmix64 from MurmurHash3: full avalanche over all 64 bits.
	h ^= h >> 33
	h *= 0xff51afd7ed558ccd
	h ^= h >> 33
	h *= 0xc4ceb9fe1a85ec53
	h ^= h >> 33
	return h
}

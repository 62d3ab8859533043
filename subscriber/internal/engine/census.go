package engine

import (
	"sort"
	"sync"
	"time"
)

// The hot-key part of [Subscription.Stats]: which partitions and keys hold
// the local backlog, and for how long. It is computed when asked, by one
// pass over the lanes, so the hot path pays only a receive time per job and
// two additions per handler call (laneStats). The pass waits on memory: a
// cache miss for each lane, its queue and its oldest job. On 100,000 keys
// each holding deliveries it takes about 80 ms, against 11 ms for the
// counts alone and 170 ms and 43 MB for a sort of every key
// (BenchmarkStats).

// StatsTop is how many partitions, and how many keys in each ranking,
// [Subscription.Stats] lists.
const StatsTop = 10

// A PartitionStats is one partition with work in the running Receive.
//
// A partition is what keys hash to with [ordering.Partition] (S3): its
// deliveries run one at a time. With the default 65,536 partitions, few
// keys share one and a partition is close to a key, so the busy ones point
// at hot keys; with a few partitions ([WithPartitions]), each is a group of
// keys that waits on its slowest. Partitions are not workers: a worker runs
// whichever partition is ready next, so a worker has no backlog of its own.
type PartitionStats struct {
	// Partition is the partition's index, ordering.Partition(key, n).
	Partition int
	// Keys counts the partition's keys with a delivery queued or running.
	Keys int
	// Queued counts their deliveries waiting for a turn.
	Queued int
	// Running reports whether a handler call runs on the partition, and
	// RunningFor how long it has run.
	Running    bool
	RunningFor time.Duration
	// Busy is the handler time of its keys since each last had nothing
	// here: it grows while the partition's keys keep a backlog.
	Busy time.Duration
}

// A KeyStats is one key with work in the running Receive.
type KeyStats struct {
	Key       string
	Partition int
	// Queued counts the key's deliveries waiting for their turn, a failed
	// message waiting for its retry included.
	Queued int
	// Running reports whether a call of the key runs, and RunningFor how
	// long it has run.
	Running    bool
	RunningFor time.Duration
	// Age is how long the oldest delivery of the key here (queued, running
	// or waiting for a retry) has been here.
	Age time.Duration
	// Calls counts the key's handler calls that ended since it last had
	// nothing here, and Busy is their handler time.
	Calls int
	Busy  time.Duration
	// Held reports that a message of the key failed and has not succeeded
	// yet (see [Subscription.HeldKeys]).
	Held bool
}

// census is the scratch of Stats, kept between calls so that a call every
// second allocates little. mu serialises the calls.
type census struct {
	mu sync.Mutex
	// index holds, by partition, 1 + the partition's entry in parts, or 0:
	// 4 bytes a partition, made on the first call. A map would cost a
	// cache miss per key.
	index []int32
	parts []PartitionStats
}

// add counts k in its partition. c.mu must be held.
func (c *census) add(k KeyStats) {
	i := c.index[k.Partition]
	if i == 0 {
		c.parts = append(c.parts, PartitionStats{Partition: k.Partition})
		i = int32(len(c.parts))
		c.index[k.Partition] = i
	}
	p := &c.parts[i-1]
	p.Keys++
	p.Queued += k.Queued
	p.Busy += k.Busy
	if k.Running {
		p.Running, p.RunningFor = true, k.RunningFor
	}
}

// ranking keeps the first StatsTop items offered, in the order before
// gives, as a sorted slice: with 10 places, most offers cost one
// comparison with the last.
type ranking[T any] struct {
	before func(a, b T) bool // a ranks before b
	items  []T
}

func (rk *ranking[T]) offer(v T) {
	n := len(rk.items)
	if n == StatsTop && !rk.before(v, rk.items[n-1]) {
		return
	}
	i := sort.Search(n, func(i int) bool { return rk.before(v, rk.items[i]) })
	if n < StatsTop {
		rk.items = append(rk.items, v)
	}
	copy(rk.items[i+1:], rk.items[i:])
	rk.items[i] = v
}

// moreBacklog ranks keys by their deliveries here, queued or running, then
// by age, then by key.
func moreBacklog(a, b KeyStats) bool {
	na, nb := a.Queued+btoi(a.Running), b.Queued+btoi(b.Running)
	if na != nb {
		return na > nb
	}
	if a.Age != b.Age {
		return a.Age > b.Age
	}
	return a.Key < b.Key
}

// older ranks keys by the age of their oldest delivery here, then by
// backlog.
func older(a, b KeyStats) bool {
	if a.Age != b.Age {
		return a.Age > b.Age
	}
	return moreBacklog(a, b)
}

// busier ranks partitions by their deliveries, queued or running, then by
// busy time, then by index.
func busier(a, b PartitionStats) bool {
	na, nb := a.Queued+btoi(a.Running), b.Queued+btoi(b.Running)
	if na != nb {
		return na > nb
	}
	if a.Busy != b.Busy {
		return a.Busy > b.Busy
	}
	return a.Partition < b.Partition
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

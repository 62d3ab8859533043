package engine

import (
	"sort"
	"sync"
	"sync/atomic"
)

// laneShards spreads the lanes over this many mutexes.
const laneShards = 64

// lanes holds a lane for every key with something in this Receive: a
// delivery queued or running, a retry pending, or a hold (S5). A key with
// none of these has no lane, so idle keys leave nothing behind.
type lanes struct {
	shards [laneShards]laneShard
	next   atomic.Uint32 // spreads the lanes of unkeyed messages over the shards
}

// A laneShard guards its lanes, and every field of each, with mu.
type laneShard struct {
	mu    sync.Mutex
	keyed map[string]*Lane // by key
	loose map[*Lane]bool   // lanes of messages without a key, one message each
}

// with calls f with the lane of key, made if there is none, or with a new
// Lane of its own for a message without a key, under the lane's shard's
// mutex, and returns the lane. f must not block.
func (ls *lanes) with(r *Engine, key string, f func(l *Lane)) *Lane {
	var l *Lane
	if key == "" {
		sh := &ls.shards[ls.next.Add(1)%laneShards]
		sh.mu.Lock()
		defer sh.mu.Unlock()
		l = sh.looseLane(r)
	} else {
		sh := &ls.shards[laneHash(key)%laneShards]
		sh.mu.Lock()
		defer sh.mu.Unlock()
		l = sh.keyLane(r, key)
	}
	f(l)
	return l
}

// keyLane returns the lane of key, making it if there is none. sh.mu must
// be held.
func (sh *laneShard) keyLane(r *Engine, key string) *Lane {
	if l := sh.keyed[key]; l != nil {
		return l
	}
	if sh.keyed == nil {
		sh.keyed = make(map[string]*Lane)
	}
	l := &Lane{r: r, sh: sh, Key: key}
	sh.keyed[key] = l
	return l
}

// looseLane makes a lane for one message without a key. sh.mu must be held.
func (sh *laneShard) looseLane(r *Engine) *Lane {
	if sh.loose == nil {
		sh.loose = make(map[*Lane]bool)
	}
	l := &Lane{r: r, sh: sh}
	sh.loose[l] = true
	return l
}

// laneHash is FNV-1a, 32 bits: it only spreads keys over the shards.
func laneHash(key string) uint32 {
	h := uint32(2166136261)
	for i := 0; i < len(key); i++ {
		h ^= uint32(key[i])
		h *= 16777619
	}
	return h
}

// each calls f for every lane, with its shard's mutex held.
func (ls *lanes) each(f func(l *Lane)) {
	for i := range ls.shards {
		sh := &ls.shards[i]
		sh.mu.Lock()
		for _, l := range sh.keyed {
			f(l)
		}
		for l := range sh.loose {
			f(l)
		}
		sh.mu.Unlock()
	}
}

// idle reports whether no lane holds anything: no delivery queued,
// running or waiting for a retry, no key held and no room gap.
func (ls *lanes) idle() bool {
	busy := false
	ls.each(func(l *Lane) {
		busy = busy || l.Running != nil || l.Queue.Len() > 0 || l.trouble != nil || l.roomGap != ""
	})
	return !busy
}

// Snapshot counts the deliveries queued and running now, and lists the
// keys waiting on a failed message.
func (ls *lanes) Snapshot() (queued, running int, held []HeldKey) {
	ls.each(func(l *Lane) {
		queued += l.Queue.Len()
		if l.Running != nil {
			running++
		}
		if l.trouble != nil {
			held = append(held, l.heldKey())
		}
	})
	sortHeld(held)
	return queued, running, held
}

// sortHeld sorts held keys oldest failure first.
func sortHeld(held []HeldKey) {
	sort.Slice(held, func(i, j int) bool {
		if !held[i].Since.Equal(held[j].Since) {
			return held[i].Since.Before(held[j].Since)
		}
		return held[i].Key < held[j].Key
	})
}

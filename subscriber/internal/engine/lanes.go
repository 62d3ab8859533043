package engine

// The walks over every lane (each, idle, Snapshot), which the shutdown,
// the room's watch, Stats and Replay's end make. The lanes and their
// shards are in lane.go.

import (
	"sort"
)

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

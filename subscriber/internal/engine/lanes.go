package engine

// The walks over every lane (each, idle, Snapshot), which the shutdown,
// the room's watch, Stats and Replay's end make. The lanes and their
// shards are in lane.go.

import (
	"sort"
	"time"
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

// pushing marks j, a push request's job, as the running call of its key's
// lane, or of a lane of its own if it has no key, and returns the lane.
func (ls *lanes) pushing(r *Engine, j *Job) *Lane {
	return ls.with(r, j.D.Key, func(l *Lane) {
		j.fresh = l.holdsNothing()
		l.Running, l.busySince = j, time.Now()
	})
}

// laneCall is the door of a call CallInLane runs: it ends the call in the
// key's lane, where the held-key record notes the verdict, and hands the
// verdict to CallInLane's caller, which delivers it as its answer. Key
// events are told last, once the answer can be written, so that a
// callback that exits the goroutine leaves nothing undone.
type laneCall struct {
	l      *Lane
	answer chan<- Verdict
}

func (a laneCall) Settle(j *Job, v Verdict) {
	fx := a.l.pushed(j, v)
	a.answer <- v
	a.l.r.apply(a.l, &fx)
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

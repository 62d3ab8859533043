package orderingtest

import (
	"container/heap"
	"time"
)

// A message that becomes deliverable may have to wait before it goes out:
// the server's latency (WithLatency) delays every delivery. Such a message
// has a due time, and nothing delivers it before then:
//
//   - A key's messages wait in its queue with their entry's due time. A key
//     whose next message is not due is not routed to any stream; it is
//     delayed, and routed again when the message is due. Later messages of
//     the key wait behind it, so order holds whatever their own due times.
//   - A message without order waits in Server.delays, and joins the
//     subscription's line of unordered messages when it is due. That line
//     thus only ever holds messages that are due.
//
// A server that delays nothing never schedules anything here: every due
// time is zero, which means at once.

// A delayed is an action the server takes at a given time on behalf of a
// subscription: route a delayed key again, or put an unordered message in
// line. Guarded by Server.mu.
type delayed struct {
	at    time.Time
	seq   int64 // orders actions due at the same time: first scheduled, first taken
	sub   *subscription
	epoch int       // sub.epoch when scheduled; a reset since makes the action void
	key   *keyState // route this key again, or
	entry *entry    // put this unordered message in line
}

// delayHeap orders delayed actions by time, earliest first.
type delayHeap []*delayed

func (h delayHeap) Len() int { return len(h) }
func (h delayHeap) Less(i, j int) bool {
	if h[i].at.Equal(h[j].at) {
		return h[i].seq < h[j].seq
	}
	return h[i].at.Before(h[j].at)
}
func (h delayHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *delayHeap) Push(x any)   { *h = append(*h, x.(*delayed)) }
func (h *delayHeap) Pop() any {
	old := *h
	d := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	return d
}

// dueAfter returns when a message that becomes deliverable now, and must
// first wait for wait, may go out: wait plus the server's latency from now.
// It returns the zero time, meaning at once, when there is nothing to wait.
func (s *Server) dueAfter(wait time.Duration) time.Time {
	if d := wait + s.cfg.latency; d > 0 {
		return time.Now().Add(d)
	}
	return time.Time{}
}

// notDue reports whether e must wait longer than now.
func (e *entry) notDue(now time.Time) bool {
	return !e.due.IsZero() && now.Before(e.due)
}

// delayLocked schedules d, and makes sure the timer fires by then.
func (s *Server) delayLocked(d *delayed) {
	s.nextDelay++
	d.seq = s.nextDelay
	d.epoch = d.sub.epoch
	heap.Push(&s.delays, d)
	s.armLocked()
}

// line puts an unordered message in line for delivery, or schedules that
// for when it is due.
func (sub *subscription) line(e *entry) {
	if e.notDue(time.Now()) {
		sub.srv.delayLocked(&delayed{at: e.due, sub: sub, entry: e})
		return
	}
	sub.loose.push(e)
	sub.wakeAll()
}

// delayedLoose returns the unordered messages of sub that wait in
// Server.delays to be due, which are in no line yet.
func (sub *subscription) delayedLoose() []*entry {
	var out []*entry
	for _, d := range sub.srv.delays {
		if d.sub == sub && d.entry != nil && d.epoch == sub.epoch {
			out = append(out, d.entry)
		}
	}
	return out
}

// delayKey holds k back until at, when its next message is due; until then
// route leaves it alone.
func (sub *subscription) delayKey(k *keyState, at time.Time) {
	k.delayed = true
	sub.srv.delayLocked(&delayed{at: at, sub: sub, key: k})
}

// fireLocked takes a delayed action whose time has come.
func (s *Server) fireLocked(d *delayed) {
	sub := d.sub
	if sub.deleted || d.epoch != sub.epoch {
		return // a Seek or a deletion dropped what it was about
	}
	if d.entry != nil {
		sub.loose.push(d.entry)
		sub.wakeAll()
		return
	}
	d.key.delayed = false
	sub.route(d.key)
}

package orderingtest

import (
	"container/heap"
	"time"
)

// A lease is one outstanding delivery: the message may not be delivered
// again before the deadline unless it is nacked. Guarded by Server.mu.
type lease struct {
	ackID    string
	entry    *entry
	sub      *subscription
	stream   *stream
	deadline time.Time
	index    int // position in Server.leases; -1 once removed
}

// leaseHeap orders leases by deadline, so expiry costs O(log n) per lease
// and one timer serves the whole server: no polling.
type leaseHeap []*lease

func (h leaseHeap) Len() int           { return len(h) }
func (h leaseHeap) Less(i, j int) bool { return h[i].deadline.Before(h[j].deadline) }
func (h leaseHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].index, h[j].index = i, j
}
func (h *leaseHeap) Push(x any) {
	l := x.(*lease)
	l.index = len(*h)
	*h = append(*h, l)
}
func (h *leaseHeap) Pop() any {
	old := *h
	l := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	l.index = -1
	return l
}

// leaseFor is how long a lease lasts when secs seconds are asked for.
func (s *Server) leaseFor(secs time.Duration) time.Duration {
	if s.cfg.ackDeadline > 0 {
		return s.cfg.ackDeadline
	}
	return secs
}

func (s *Server) addLeaseLocked(l *lease) {
	heap.Push(&s.leases, l)
	s.armLocked()
}

func (s *Server) extendLeaseLocked(l *lease, d time.Duration) {
	l.deadline = time.Now().Add(d)
	heap.Fix(&s.leases, l.index)
	s.armLocked()
}

func (s *Server) removeLeaseLocked(l *lease) {
	if l.index >= 0 {
		heap.Remove(&s.leases, l.index)
	}
}

// armLocked makes sure the timer fires no later than the earliest lease
// deadline or delayed action. A timer armed earlier than needed just fires,
// finds nothing due and re-arms, so later times never need a reset.
func (s *Server) armLocked() {
	var first time.Time
	if len(s.leases) > 0 {
		first = s.leases[0].deadline
	}
	if len(s.delays) > 0 && (first.IsZero() || s.delays[0].at.Before(first)) {
		first = s.delays[0].at
	}
	if !first.IsZero() && (s.armed.IsZero() || first.Before(s.armed)) {
		s.armed = first
		s.timer.Reset(time.Until(first))
	}
}

// runTimers expires leases as their deadlines pass, and takes delayed
// actions as they fall due, until Close.
func (s *Server) runTimers() {
	defer s.wg.Done()
	for {
		select {
		case <-s.done:
			return
		case <-s.timer.C:
			s.mu.Lock()
			s.armed = time.Time{}
			now := time.Now()
			for len(s.leases) > 0 && !s.leases[0].deadline.After(now) {
				l := heap.Pop(&s.leases).(*lease)
				l.sub.expire(l)
			}
			for len(s.delays) > 0 && !s.delays[0].at.After(now) {
				s.fireLocked(heap.Pop(&s.delays).(*delayed))
			}
			s.armLocked()
			s.changedLocked()
			s.mu.Unlock()
		}
	}
}

package subscriber

import "sync/atomic"

// room keeps one key's backlog from using up the official client's flow
// control (S10). The service sends a subscriber at most
// MaxOutstandingMessages messages (and MaxOutstandingBytes bytes) that it
// has not acked or nacked; if a slow, retrying or held key kept all of its
// backlog here, that window would fill with it and the other keys would
// starve.
//
// Every key may queue [WithKeyBacklog] deliveries. Past that, a key may
// queue more only while the whole Receive holds less than half of the
// window; otherwise its delivery is nacked, and the service sends it again
// later, in order. Half the window is therefore always left to keys within
// their backlog. A nacked message may come back more than once, which S6
// absorbs.
//
// Once a delivery of a key is nacked for room, every later delivery of
// the key is nacked too until the service sends that one back (see
// lane.gap): it comes back before them, and none may run before it.
//
// On a subscription with a dead-letter policy nothing is nacked for room:
// each nack would spend a delivery attempt of a message that never ran,
// and enough of them would have the service dead-letter it unprocessed.
type room struct {
	perKey   int
	maxMsgs  int64 // half the official window; 0 for no limit
	maxBytes int64 // half the official byte window; 0 for no limit

	// msgs and bytes count the jobs of this Receive that are not settled:
	// queued, running or waiting for a retry.
	msgs, bytes atomic.Int64
}

// init sets the bounds of rm from the options and the subscription's
// dead-letter limit.
func (rm *room) init(cfg *config, deadLetterAttempts int) {
	rs := cfg.receive
	rm.perKey = cfg.keyBacklog
	if deadLetterAttempts > 0 {
		return // no limit: see room
	}
	switch {
	case rs.MaxOutstandingMessages > 0:
		rm.maxMsgs = int64(max(1, rs.MaxOutstandingMessages/2))
	case rs.MaxOutstandingMessages == 0: // the official client's default
		rm.maxMsgs = int64(defaultMaxOutstanding / 2)
	}
	switch {
	case rs.MaxOutstandingBytes > 0:
		rm.maxBytes = int64(max(1, rs.MaxOutstandingBytes/2))
	case rs.MaxOutstandingBytes == 0:
		rm.maxBytes = int64(defaultMaxOutstandingBytes / 2)
	}
}

// The official client's flow-control defaults (pubsub.DefaultReceiveSettings).
const (
	defaultMaxOutstanding      = 1000
	defaultMaxOutstandingBytes = 1e9
)

// admit reports whether a key with queued deliveries waiting may queue j
// too.
func (rm *room) admit(queued int, j *job) bool {
	switch {
	case queued < rm.perKey:
		return true
	case rm.maxMsgs > 0 && rm.msgs.Load() >= rm.maxMsgs:
		return false
	case rm.maxBytes > 0 && rm.bytes.Load()+j.size > rm.maxBytes:
		return false
	}
	return true
}

// take counts j, which is queued.
func (rm *room) take(j *job) {
	j.counted = true
	rm.msgs.Add(1)
	rm.bytes.Add(j.size)
}

// give uncounts j, which is settled.
func (rm *room) give(j *job) {
	if j.counted {
		rm.msgs.Add(-1)
		rm.bytes.Add(-j.size)
	}
}

// openGap nacks id for room: the key's later deliveries are nacked until
// it comes back (S10). The shard's mutex must be held.
func (l *lane) openGap(id string) {
	if l.gap == id {
		return
	}
	l.closeGap()
	l.gap = id
	l.gapEnd = l.r.clock.after(l.r.cfg.redeliveryWait, func() {
		var fx effects
		l.sh.mu.Lock()
		if l.gap == id {
			l.gap, l.gapEnd = "", nil
			l.release()
		}
		l.sh.mu.Unlock()
		l.r.apply(l, &fx)
	})
}

// closeGap ends the lane's gap, if it has one. The shard's mutex must be
// held.
func (l *lane) closeGap() {
	if l.gap == "" {
		return
	}
	l.r.clock.stop(l.gapEnd)
	l.gap, l.gapEnd = "", nil
}

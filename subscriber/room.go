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
// On a subscription with a dead-letter policy, a delivery past half of its
// allowed attempts is never nacked for room: each such nack spends an
// attempt the handler may need.
type room struct {
	perKey   int
	maxMsgs  int64 // half the official window; 0 for no limit
	maxBytes int64 // half the official byte window; 0 for no limit
	dlq      int   // the subscription's dead-letter limit; 0 if it has none

	// msgs and bytes count the jobs of this Receive that are not settled:
	// queued, running or waiting for a retry.
	msgs, bytes atomic.Int64
}

// init sets the bounds of rm from the options and the subscription's
// dead-letter limit.
func (rm *room) init(cfg *config, deadLetterAttempts int) {
	rs := cfg.receive
	rm.perKey, rm.dlq = cfg.keyBacklog, deadLetterAttempts
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
	case rm.dlq > 0 && 2*j.deliveryAttempt() > rm.dlq:
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

package engine

import (
	"sync/atomic"
	"time"
)

// room keeps one key's backlog from using up the official client's flow
// control (S10). The service sends a subscriber at most
// MaxOutstandingMessages messages (and MaxOutstandingBytes bytes) that it
// has not acked or nacked; if a slow, retrying or held key kept all of its
// backlog here, that window would fill with it and the other keys would
// starve.
//
// A key may always queue [WithKeyBacklog] deliveries. Past that, it may
// queue more while the Receive holds less than half of the window, or
// while the key drains: it is not failing, and its backlog would take less
// than drainLimit at the pace of its recent calls, counting the time the
// current call has run so far. Otherwise its delivery is nacked, and the
// service sends it again later. A healthy key with a large backlog, such
// as a hot key, therefore keeps it, and a stuck one does not.
//
// A key can turn stuck after its backlog was queued, for example when a
// handler hangs. While the Receive holds half the window or more, a watch
// looks every roomCheck for such keys and nacks their queued deliveries
// past the backlog.
//
// Once a delivery of a key is nacked for room, every later delivery of the
// key is nacked too until the service sends that one back (see lane.gap):
// it comes back before them, and none may run before it.
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

	// watching is set while the watch's timer is pending, and watch is
	// that timer, for shutdown to stop.
	watching atomic.Bool
	watch    atomic.Pointer[time.Timer]
}

// drainLimit is how long a key's backlog may take to drain, at its recent
// pace, for the key to count as draining.
const drainLimit = time.Second

// roomCheck is how often the watch looks for stuck keys while the window
// is at least half full.
const roomCheck = 100 * time.Millisecond

// init sets the bounds of rm from the options and the subscription's
// dead-letter limit.
func (rm *room) init(cfg *Config, deadLetterAttempts int) {
	rs := cfg.Receive
	rm.perKey = cfg.KeyBacklog
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

// pressed reports whether the Receive holds half its window or more, or
// would with size more bytes.
func (rm *room) pressed(size int64) bool {
	return (rm.maxMsgs > 0 && rm.msgs.Load() >= rm.maxMsgs) ||
		(rm.maxBytes > 0 && rm.bytes.Load()+size > rm.maxBytes)
}

// admit reports whether l may queue j. The shard's mutex must be held.
func (rm *room) admit(l *Lane, j *Job, now time.Time) bool {
	return l.Queue.Len() < rm.perKey || !rm.pressed(j.size) || !l.stuck(now)
}

// give uncounts j, which is settled.
func (rm *room) give(j *Job) {
	if j.counted {
		rm.msgs.Add(-1)
		rm.bytes.Add(-j.size)
	}
}

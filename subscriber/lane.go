package subscriber

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/keyorder/keyorder/internal/fifo"
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
	keyed map[string]*lane // by key
	loose map[*lane]bool   // lanes of messages without a key, one message each
}

// A lane is one key's state in a Receive. It runs the key's deliveries one
// at a time, in the order they arrived, by submitting itself to the
// worker pool as a task, a turn, whenever it has a delivery to run and no
// turn queued or running and no retry pending (active). A turn runs one
// delivery.
//
// A lane is also the unit of failure (S5): while its oldest message waits
// for its next attempt, the lane has a timer and no turn, so it holds no
// worker, and the key's later deliveries wait behind the message. When the
// failure policy holds the key, the lane stays, with nothing queued, to
// turn away the key's deliveries until the failed message comes back.
//
// A message without a key gets a lane of its own, outside the map of keys,
// that lives as long as that one message.
type lane struct {
	r   *receiver // set when made
	sh  *laneShard
	key string

	// queue holds the deliveries received and not started, oldest first;
	// the head may be a failed message waiting for its next attempt.
	queue fifo.Queue[*job]
	// running is the job whose handler is running, nil otherwise, and
	// busySince when its call began.
	running   *job
	busySince time.Time
	// pace is the recent duration of the key's handler calls, a moving
	// average; 0 before the first. Room uses it to tell a key that drains
	// from one that is stuck (S10).
	pace time.Duration
	// active is set while a turn is in the pool or running, or retry is
	// pending: then nothing else may submit a turn.
	active bool
	// retry fires when the head's next attempt is due.
	retry *time.Timer
	// trouble is the key's failing message, nil while it is healthy.
	trouble *trouble
	// gap is the first delivery of the key nacked for room (S10). The
	// service sends it back before any later message of the key, so every
	// later delivery is nacked too until it comes back, or until gapEnd
	// fires after WithRedeliveryWait, in case it went to another client.
	gap    string
	gapEnd *time.Timer

	// stats counts the key's calls while it has a lane, for Stats.
	stats laneStats
	// pk is the lane's part in parking (park.go).
	pk laneParking
}

// trouble is a lane's failing message: the one no later message of the key
// may overtake (S5). It lasts from the message's first failure to its
// success, or until the service gives up on it.
type trouble struct {
	id      string
	since   time.Time
	attempt int   // handler calls so far
	err     error // the last one's
	retryAt time.Time
	// held is set while the message is away: the failure policy nacked
	// it, and the key waits for the service to bring it back, until
	// lapse fires.
	held  bool
	lapse *time.Timer
	// reported is set once KeyHeld has been emitted, so that KeyReleased
	// is due when the trouble ends.
	reported bool
}

// keyed returns the lane of key, making it if there is none, with its
// shard's mutex locked; the caller unlocks it.
func (ls *lanes) keyed(r *receiver, key string) *lane {
	sh := &ls.shards[laneHash(key)%laneShards]
	sh.mu.Lock()
	if l := sh.keyed[key]; l != nil {
		return l
	}
	if sh.keyed == nil {
		sh.keyed = make(map[string]*lane)
	}
	l := &lane{r: r, sh: sh, key: key}
	sh.keyed[key] = l
	return l
}

// loose returns a new lane for one message without a key, with its shard's
// mutex locked; the caller unlocks it.
func (ls *lanes) loose(r *receiver) *lane {
	sh := &ls.shards[ls.next.Add(1)%laneShards]
	sh.mu.Lock()
	if sh.loose == nil {
		sh.loose = make(map[*lane]bool)
	}
	l := &lane{r: r, sh: sh}
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

// release removes the lane from its shard once it holds nothing. The
// shard's mutex must be held.
func (l *lane) release() {
	if l.active || l.running != nil || l.queue.Len() > 0 || l.trouble != nil || l.gap != "" {
		return
	}
	if l.key == "" {
		delete(l.sh.loose, l)
	} else if l.sh.keyed[l.key] == l {
		delete(l.sh.keyed, l.key)
	}
}

// each calls f for every lane, with its shard's mutex held.
func (ls *lanes) each(f func(l *lane)) {
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

// snapshot counts the deliveries queued and running now, and lists the
// keys waiting on a failed message.
func (ls *lanes) snapshot() (queued, running int, held []HeldKey) {
	ls.each(func(l *lane) {
		queued += l.queue.Len()
		if l.running != nil {
			running++
		}
		if l.trouble != nil {
			held = append(held, l.heldKey())
		}
	})
	sortHeld(held)
	return queued, running, held
}

// heldKey describes the lane's trouble. The shard's mutex must be held.
func (l *lane) heldKey() HeldKey {
	t := l.trouble
	k := HeldKey{
		Key: l.key, MessageID: t.id, Since: t.since, Attempt: t.attempt, Err: t.err,
		Held: t.held, RetryAt: t.retryAt, Queued: l.queue.Len(),
	}
	if k.Queued > 0 && l.queue.At(0).d.ID == t.id {
		k.Queued-- // the failed message itself, waiting at the head for its retry
	}
	if l.running != nil && l.running.d.ID != t.id {
		k.Queued++
	}
	return k
}

// effects collects what a change to a lane decided and must be done once
// its shard's mutex is released: acks and nacks, which call into the
// official client, the lane's next turn, and events for user callbacks,
// which may block, panic or exit the goroutine.
type effects struct {
	settle []settlement
	turn   bool
	events []KeyEvent
}

// settlement is the fate of one job: acked, or nacked for a reason.
type settlement struct {
	j   *job
	out outcome
}

func (fx *effects) add(j *job, out outcome) {
	fx.settle = append(fx.settle, settlement{j, out})
}

// clock starts the timers of a Receive and waits for their functions.
type clock struct{ wg sync.WaitGroup }

// after calls f in its own goroutine after d, as time.AfterFunc does, and
// counts it until it returns or is stopped.
func (c *clock) after(d time.Duration, f func()) *time.Timer {
	c.wg.Add(1)
	return time.AfterFunc(d, func() {
		defer c.wg.Done()
		f()
	})
}

// stop stops t, and reports whether f will not run.
func (c *clock) stop(t *time.Timer) bool {
	if t != nil && t.Stop() {
		c.wg.Done()
		return true
	}
	return false
}

package publisher

import (
	"context"
	"sync"

	"cloud.google.com/go/pubsub/v2"

	"github.com/keyorder/keyorder/ordering"
)

// numShards spreads the gates over this many mutexes.
const numShards = 32

// shrinkAt is the number of keys above which an emptied shard map is
// replaced: Go maps keep their peak size, and P7 wants an idle key to
// leave nothing behind.
const shrinkAt = 1024

// A shard holds the gates of the keys that hash to it.
type shard struct {
	mu      sync.Mutex
	keys    map[string]*keyState // keys with messages outstanding; guarded by mu
	peak    int                  // largest len(keys) since keys was made; guarded by mu
	closing bool                 // set once by Close; guarded by mu
	seq     uint64               // messages enqueued so far, for Result.seq; guarded by mu
}

func (sh *shard) markClosing() {
	sh.mu.Lock()
	sh.closing = true
	sh.mu.Unlock()
}

// keyState is the gate of one key with messages outstanding. It exists
// exactly while inflight is not empty, and one watch goroutine owns it for
// that time: when inflight drains, the watcher deletes it (P7).
//
// Every field is guarded by the shard's mutex.
type keyState struct {
	// inflight are the key's messages in the official client's hands,
	// in Publish order. Its results become ready in that order, as the
	// official client sends one batch of a key at a time (P3).
	inflight []*Result
	// failure is the cause of the key's last failure while its tail
	// drains in the official client, nil when the key is healthy. It is
	// set when the first failed result is reported, together with the
	// failure of every message then in inflight, and cleared when
	// inflight has drained.
	failure error
	// held are messages published after failure was reported (P5). They
	// wait here, in Publish order, until inflight drains and the key is
	// resumed: given to the official client now, they would fail too, as
	// it keeps the key paused.
	held []*Result
}

// enqueue hands r to its key's gate, which sends it now or holds it (P5).
func (p *Publisher) enqueue(ctx context.Context, r *Result) {
	key := r.msg.OrderingKey
	sh := &p.shards[ordering.Hash(key)%numShards]
	sh.mu.Lock()
	defer sh.mu.Unlock()
	ks, ok := sh.keys[key]
	if !ok {
		ks = &keyState{}
		sh.keys[key] = ks
		sh.peak = max(sh.peak, len(sh.keys))
		p.watchers.Add(1)
		go p.watch(sh, key, ks)
	}
	sh.seq++
	r.seq = sh.seq
	if ks.failure != nil {
		ks.held = append(ks.held, r)
		return
	}
	r.under = p.pub.Publish(ctx, &r.msg)
	ks.inflight = append(ks.inflight, r)
}

// watch owns ks while its key has messages in flight: it waits for their
// official results in order, releases their flow control, settles their
// Results, and deletes ks when nothing is left. A key's batches finish in
// order (P3), so waiting in order releases each message's room as soon as
// it is done (P8). It settles every result
// that is ready when it wakes, so a batch costs one wake-up, not one per
// message.
func (p *Publisher) watch(sh *shard, key string, ks *keyState) {
	defer p.watchers.Done()
	flush := false
	sh.mu.Lock()
	for len(ks.inflight) > 0 {
		head := ks.inflight[0].under
		sh.mu.Unlock()
		if flush {
			// Held messages were sent while closing or flushing, after
			// that flush may have run: flush them rather than wait for
			// the delay threshold.
			p.pub.Flush()
			flush = false
		}
		<-head.Ready()
		sh.mu.Lock()
		for len(ks.inflight) > 0 {
			r := ks.inflight[0]
			if !readyNow(r.under) {
				break
			}
			id, err := r.under.Get(context.Background())
			if r.room {
				r.room = false
				p.flow.release(r.size)
			}
			ks.inflight[0] = nil
			ks.inflight = ks.inflight[1:]
			if p.settle(key, ks, r, id, err) && (sh.closing || p.flushing.Load() > 0) {
				flush = true
			}
		}
	}
	delete(sh.keys, key)
	if len(sh.keys) == 0 && sh.peak > shrinkAt {
		sh.keys, sh.peak = make(map[string]*keyState), 0
	}
	sh.mu.Unlock()
}

// readyNow reports whether the official result r is ready, without waiting.
func readyNow(r *pubsub.PublishResult) bool {
	select {
	case <-r.Ready():
		return true
	default:
		return false
	}
}

// settle makes r ready with its official outcome, unless it failed earlier
// with its key's tail, and advances the key's failure state. It reports
// whether held messages were sent. The shard's mutex is held, so a Publish
// call that sees a failure reported also sees the key failing.
func (p *Publisher) settle(key string, ks *keyState, r *Result, id string, err error) (sent bool) {
	if !r.isReady() {
		if err == nil {
			// The official client is done with the message, and so is
			// everyone else: the Result need not keep it (P7).
			r.under = nil
			r.dropMessage()
			r.resolve(id, nil)
		} else {
			// The first failure since the key was last healthy: new
			// messages are held from now on (P5), and the whole tail
			// fails with it at once (P4). The official client keeps the
			// key paused, so the tail cannot succeed; reporting it now
			// rather than batch by batch means a caller that sees this
			// failure has seen its whole tail too.
			ks.failure = err
			r.resolve("", &PublishError{Key: key, Err: err})
			for _, t := range ks.inflight {
				t.resolve("", &PublishError{Key: key, Err: err, Skipped: true})
			}
		}
	}
	if r.hasFailed() {
		// A failed message stays in its Result for Retry.
		r.letGo()
	}
	if ks.failure == nil || len(ks.inflight) > 0 {
		return false
	}
	// The tail has drained in the official client too. Only now is it
	// safe to resume the key: resuming on the first failure would let the
	// next queued batch of the tail through, after the failed message.
	p.pub.ResumePublish(key)
	ks.failure = nil
	for i, h := range ks.held {
		h.under = p.pub.Publish(context.Background(), &h.msg)
		ks.inflight = append(ks.inflight, h)
		ks.held[i] = nil
	}
	ks.held = nil
	return len(ks.inflight) > 0
}

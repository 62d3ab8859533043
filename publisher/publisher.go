package publisher

import (
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"sync"
	"sync/atomic"

	"cloud.google.com/go/pubsub/v2"

	"github.com/keyorder/keyorder/internal/resource"
)

// Publisher publishes messages to one topic with ordering keys. It wraps
// one official *pubsub.Publisher with message ordering on, which keeps one
// batch in flight per key (P3), and adds key resolution (P1, P2), input
// validation (P6), a per-key failure gate with automatic resume (P4, P5),
// and a shutdown bounded by a context.
//
// A Publisher is safe for concurrent use. Its zero value is not usable:
// create one with [New].
type Publisher struct {
	pub        *pubsub.Publisher
	defaultKey string
	maxBytes   int          // largest encoded message the service takes on this topic
	flow       *flowControl // nil when the settings ask for no flow control
	rec        *recorder    // metrics and logs (observe.go)

	// shards map keys to their gates (gate.go), spread by key so that
	// Publish calls on different keys rarely share a map's mutex; each
	// gate has a mutex of its own.
	shards [numShards]shard
	seed   maphash.Seed // of the shards' hash
	// unordered keeps track of the unordered messages in the official
	// client's hands, to count them and release their room (unordered.go).
	unordered unordered
	// stamps makes the key counters that stamp keyed messages (stamp.go);
	// nil without stamps. counterWindow is each shard's share of
	// counterWindow.
	stamps        *stamper
	counterWindow int

	// closeMu orders Publish against Close: Publish holds it for reading
	// while it checks closed and hands its message over, Close holds it
	// to set closed. Once Close has set closed, no Publish is half done.
	closeMu sync.RWMutex
	closed  bool // guarded by closeMu

	// watchers counts the gate goroutines, one per key with messages in
	// flight, and the goroutine that watches unordered messages under
	// flow control. Add is called by Publish while it holds closeMu for
	// reading, so every Add happens before Close sets closed and then
	// waits.
	watchers sync.WaitGroup
	// flushing counts the Flush calls under way, and closing is set once
	// Close has begun: held messages sent while either holds are flushed
	// at once rather than left to the thresholds (see watch).
	flushing  atomic.Int32
	closing   atomic.Bool
	closeOnce sync.Once
	done      chan struct{} // closed by shutdown when every result is ready
}

// New returns a Publisher for the topic topicID (an ID or a full
// "projects/P/topics/T" name) of client's project. Like the official
// client, it does no I/O: a missing topic shows up as failed results.
//
// Invalid arguments and options return an error matching
// [ErrInvalidConfig], among them a topic ID the service would refuse: it
// must be 3 to 255 characters of ASCII letters, digits and - _ . ~ + %,
// start with a letter, and not start with "goog".
//
// The caller keeps ownership of client and closes it after [Publisher.Close].
func New(client *pubsub.Client, topicID string, opts ...Option) (*Publisher, error) {
	if client == nil {
		return nil, fmt.Errorf("%w: nil client", ErrInvalidConfig)
	}
	if err := resource.Topic(topicID); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	cfg := config{settings: pubsub.DefaultPublishSettings}
	for i, opt := range opts {
		if opt == nil {
			return nil, fmt.Errorf("%w: option %d is nil", ErrInvalidConfig, i)
		}
		if err := opt(&cfg); err != nil {
			return nil, err
		}
	}
	p := &Publisher{
		pub:        client.Publisher(topicID),
		defaultKey: cfg.defaultKey,
		flow:       newFlowControl(cfg.settings.FlowControlSettings),
		seed:       maphash.MakeSeed(),
		done:       make(chan struct{}),

		counterWindow: counterWindow / numShards,
	}
	if !cfg.noStamps {
		p.stamps = newStamper(cfg.producerID)
		if cfg.stampKey != nil {
			if err := p.stamps.signWith(cfg.stampKey); err != nil {
				return nil, err
			}
		}
	}
	if p.flow != nil {
		p.flow.reclaim = p.reclaim
	}
	settings := cfg.settings
	// keyorder does flow control itself (see flowControl).
	settings.FlowControlSettings.LimitExceededBehavior = pubsub.FlowControlIgnore
	p.pub.PublishSettings = settings
	p.pub.EnableMessageOrdering = true
	p.maxBytes = maxMessageBytes(p.pub.String())
	p.rec = newRecorder(&cfg, p.pub.String())
	for i := range p.shards {
		p.shards[i].keys = make(map[string]*keyState)
	}
	return p, nil
}

// Publish publishes msg asynchronously and returns its [Result].
//
// The ordering key is the first non-empty of [WithOrderingKey], the
// message's [ordering.Header] header, and the publisher's default (P1). It
// travels as the Pub/Sub ordering key; every other header becomes an
// attribute (P2). Messages of one key reach the topic in the order of their
// Publish calls (P3). Messages without a key are unordered and published in
// parallel.
//
// Invalid input fails at once with a *ValidationError, nothing is sent, and
// the key is not paused (P6). When a message of a key fails, its key's
// unsent tail fails with it, and the key resumes by itself (P4, P5): see
// [PublishError].
//
// Publish does not block, except under FlowControlBlock flow control (see
// [WithPublishSettings]), where it waits for room until ctx ends; it then
// returns a Result with ctx.Err(), and nothing is sent.
func (p *Publisher) Publish(ctx context.Context, msg *Message, opts ...PublishOption) *Result {
	var callKey string
	var after *Result
	for _, opt := range opts {
		if opt.key != "" {
			callKey = opt.key
		}
		if opt.after != nil {
			after = opt.after
		}
	}
	// The Result is made first and the message prepared in it, which
	// saves copying the message, and a failure is reported in it too.
	r := &Result{start: p.rec.now()}
	size, err := p.prepare(msg, callKey, &r.msg)
	if err != nil {
		return p.refuse(r, err)
	}
	r.size = size
	if p.flow != nil {
		if err := p.flow.acquire(ctx, 1, p.flow.bound(size)); err != nil {
			return p.refuse(r, err)
		}
		r.room = true
	}
	p.closeMu.RLock()
	defer p.closeMu.RUnlock()
	if p.closed {
		if p.flow != nil {
			p.flow.release(size)
		}
		return p.refuse(r, ErrClosed)
	}
	if after != nil && after.hasFailed() {
		// Checked again in the gate, where it is decided; this saves
		// making a gate for nothing.
		return p.skipAfter(r, after)
	}
	p.send(ctx, r, after)
	return r
}

// send hands r, with its room reserved, to its key's gate, or to the
// official client if it has no key; after is WithAfter's. closeMu is held
// for reading.
func (p *Publisher) send(ctx context.Context, r *Result, after *Result) {
	if r.msg.OrderingKey != "" {
		p.enqueue(ctx, r, after)
		return
	}
	p.sendUnordered(ctx, r)
}

// skipAfter fails r, unsent, with the cause of after's failure, as a
// message of after's tail (WithAfter), and releases its room.
func (p *Publisher) skipAfter(r *Result, after *Result) *Result {
	p.releaseRoom(r)
	cause := after.err
	var pe *PublishError
	if errors.As(cause, &pe) {
		cause = pe.Err
	}
	p.rec.counted(outSkipped)
	return r.fail(&PublishError{Key: r.msg.OrderingKey, Err: cause, Skipped: true})
}

// releaseRoom gives r's room back to flow control, once. r.room is on
// another cache line than the rest of r: it is looked at only with flow
// control.
func (p *Publisher) releaseRoom(r *Result) {
	if p.flow != nil && r.room {
		r.room = false
		p.flow.release(r.size)
	}
}

// Flush sends every message published before the call without waiting for
// the batching thresholds, and returns once each of their Results is ready,
// or with ctx.Err() if ctx ends first; the messages are sent all the same.
// A message held behind its key's failure (see [PublishError]) is sent when
// its key resumes, and Flush waits for it too. Outcomes are reported on the
// Results, not by Flush.
//
// Messages published while Flush runs may or may not be flushed with them.
// Flush after Close waits for Close's shutdown.
func (p *Publisher) Flush(ctx context.Context) error {
	p.closeMu.RLock()
	if p.closed {
		p.closeMu.RUnlock()
		select {
		case <-p.done:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	// The official Flush cannot be cancelled: it runs on its own goroutine,
	// counted with the watchers so that Close stops the official publisher
	// only after it. Add happens under closeMu before closed is set, hence
	// before Close waits.
	p.watchers.Add(1)
	p.closeMu.RUnlock()
	p.flushing.Add(1)
	defer p.flushing.Add(-1)
	pending := p.pending()
	sent := make(chan struct{})
	go func() {
		defer p.watchers.Done()
		defer close(sent)
		p.pub.Flush()
	}()
	// Once the official Flush returns, every message it held has an
	// official result; the gated Results follow as their keys' watchers
	// settle them, and held messages as their keys resume.
	select {
	case <-sent:
	case <-ctx.Done():
		return ctx.Err()
	}
	for _, r := range pending {
		select {
		case <-r.Ready():
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	// The unordered messages are done too: count them now, rather than
	// when the watch gets to them, so that the metrics hold every message
	// flushed.
	p.reclaim()
	return nil
}

// pending returns the gated Results that are not ready yet: the messages of
// every key in the official client's hands or held behind a failure.
// Unordered messages are not gated; the official Flush answers for them,
// and Flush then counts them.
func (p *Publisher) pending() []*Result {
	var rs []*Result
	for i := range p.shards {
		sh := &p.shards[i]
		sh.mu.Lock()
		for _, ks := range sh.keys {
			ks.mu.Lock()
			for _, r := range ks.inflight {
				if !r.isReady() {
					rs = append(rs, r)
				}
			}
			rs = append(rs, ks.held...)
			ks.mu.Unlock()
		}
		sh.mu.Unlock()
	}
	return rs
}

// watchAll makes every lazy gate watched, for shutdown to wait for. No
// gate is made once closed is set, which it is by then.
func (p *Publisher) watchAll() {
	for i := range p.shards {
		sh := &p.shards[i]
		sh.mu.Lock()
		for _, ks := range sh.keys {
			ks.watchNow()
		}
		sh.mu.Unlock()
	}
}

// Close stops the publisher: later Publish calls fail with [ErrClosed].
// It sends what is buffered and returns once every Result is ready and
// every goroutine the publisher started has exited.
//
// If ctx ends first, Close returns ctx.Err() and the shutdown carries on in
// the background; calling Close again waits for it again. Close is
// idempotent: once the shutdown has finished, it returns nil at once.
func (p *Publisher) Close(ctx context.Context) error {
	p.closeOnce.Do(func() {
		p.closeMu.Lock()
		p.closed = true
		p.closeMu.Unlock()
		p.closing.Store(true)
		go p.shutdown()
	})
	select {
	case <-p.done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// shutdown flushes the official publisher, waits for every gate to drain,
// then stops the official publisher. A gate that sends held messages while
// closing flushes them itself (see watch), so one flush here is enough.
func (p *Publisher) shutdown() {
	defer close(p.done)
	p.pub.Flush()
	p.watchAll()
	p.watchers.Wait()
	p.stopTicks()
	p.pub.Stop()
	p.rec.close()
}

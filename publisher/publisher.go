package publisher

import (
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"cloud.google.com/go/pubsub/v2"
	"github.com/googleapis/gax-go/v2"

	"github.com/keyorder/keyorder/internal/resource"
)

// Publisher publishes messages to one topic with ordering keys. It
// batches them itself, on the client's TopicAdminClient, one request in
// flight per key (P3), and adds key resolution (P1, P2), input validation
// (P6), a key's failed tail failed at once with automatic resume (P4,
// P5), and a shutdown bounded by a context.
//
// A Publisher is safe for concurrent use. Its zero value is not usable:
// create one with [New].
type Publisher struct {
	client     *pubsub.Client
	topic      string // full name
	defaultKey string
	maxBytes   int          // largest encoded message the service takes on this topic
	flow       *flowControl // nil when the settings ask for no flow control
	rec        *recorder    // metrics and logs (observe.go)
	// traces is set when the client was made with
	// EnableOpenTelemetryTracing: each message then has a create span,
	// and carries its trace context in its attributes (trace.go).
	traces bool

	// The batching (WithPublishSettings): a request carries at most
	// countThreshold messages and byteThreshold bytes (0: no limit but
	// the service's), and a lingering key is sent once it has either;
	// lingerFor caps a linger (0: none), looked at every lingerTick.
	// requestBytes is what a request's messages may take.
	countThreshold int
	byteThreshold  int64
	lingerFor      time.Duration
	lingerTick     time.Duration
	requestBytes   int
	// The requests (sender.go): their timeout (0: none), their call
	// options, with compression above compressAbove bytes (-1: never).
	timeout        time.Duration
	callOpts       []gax.CallOption
	compressedOpts []gax.CallOption
	compressAbove  int

	// shards map keys to their queues (queue.go), spread by key so that
	// Publish calls on different keys rarely share a mutex.
	shards [numShards]shard
	seed   maphash.Seed // of the shards' hash
	// lingers are the keys lingering before their first request
	// (linger.go); run the keys ready to send, and the senders
	// (sender.go).
	lingers lingers
	run     runQueue
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

	// senders counts the sender goroutines (runQueue). A sender is
	// started by a Publish or Retry call, which holds closeMu for
	// reading, by the lingers' timer, which Close stops before it waits,
	// or by a sender; so every Add from zero happens before Close waits.
	senders sync.WaitGroup
	// flushing counts the Flush calls under way, and closing is set once
	// Close has begun: a key that would linger is sent at once.
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
	settings := cfg.settings
	topic := topicName(client, topicID)
	p := &Publisher{
		client:     client,
		topic:      topic,
		defaultKey: cfg.defaultKey,
		flow:       newFlowControl(settings.FlowControlSettings),
		seed:       maphash.MakeSeed(),
		done:       make(chan struct{}),
		maxBytes:   maxMessageBytes(topic),
		traces:     clientTraces(client),

		countThreshold: maxRequestCount,
		lingerFor:      min(settings.DelayThreshold, lingerMax),
		requestBytes:   pubsub.MaxPublishRequestBytes - fieldBound(len(topic)),
		timeout:        settings.Timeout,
		compressAbove:  -1,
		counterWindow:  counterWindow / numShards,
	}
	if cfg.batchBounds {
		// As the official client's bundles.
		if settings.CountThreshold > 0 {
			p.countThreshold = min(settings.CountThreshold, maxRequestCount)
		}
		p.byteThreshold = int64(settings.ByteThreshold)
	}
	p.lingerTick = min(lingerTick, p.lingerFor)
	if settings.EnableCompression {
		p.compressAbove = max(settings.CompressionBytesThreshold, 0)
	}
	p.callOpts, p.compressedOpts = callOptions(client)
	p.lingers.p = p
	p.run.p = p
	p.run.max = defaultInFlight()
	if settings.NumGoroutines > 0 {
		p.run.max = settings.NumGoroutines
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
		p.flow.reclaim = func() {}
	}
	p.rec = newRecorder(&cfg, topic)
	for i := range p.shards {
		p.shards[i].keys = make(map[string]*keyQueue)
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
	var tf traceFields
	if p.traces {
		// The span's context goes in the attributes before prepare
		// checks them: it counts against the message's limits (P6).
		r.span, tf = p.startCreate(ctx, msg)
	}
	size, err := p.prepare(msg, callKey, &r.msg, tf)
	if err != nil {
		return p.refuse(r, err)
	}
	if r.span != nil {
		r.span.keyed(r.msg.OrderingKey)
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
		// Checked again in enqueue, where it is decided; this saves
		// taking the shard's mutex for nothing.
		return p.skipAfter(r, after)
	}
	p.send(ctx, r, after)
	return r
}

// send hands r, with its room reserved, to its key's queue; after is
// WithAfter's. closeMu is held for reading.
func (p *Publisher) send(ctx context.Context, r *Result, after *Result) {
	p.enqueue(ctx, r, after)
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

// releaseRoom gives r's room back to flow control, once.
func (p *Publisher) releaseRoom(r *Result) {
	if p.flow != nil && r.room {
		r.room = false
		p.flow.release(r.size)
	}
}

// Flush sends every message published before the call without waiting for
// the batching thresholds, and returns once each of their Results is ready,
// or with ctx.Err() if ctx ends first; the messages are sent all the same.
// Outcomes are reported on the Results, not by Flush.
//
// Messages published while Flush runs may or may not be flushed with them.
// Flush after Close waits for Close's shutdown.
//
// With a ctx already done, Flush sends and returns ctx.Err() at once: a
// caller that has published all it has for now, as an outbox relay after
// each page, ends the linger (see Batching) without waiting for anything.
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
	p.flushing.Add(1)
	defer p.flushing.Add(-1)
	var rs []*Result
	if ctx.Err() == nil {
		rs = p.outstanding()
	}
	p.lingers.endAll(false)
	p.closeMu.RUnlock()
	if err := ctx.Err(); err != nil {
		return err
	}
	for _, r := range rs {
		select {
		case <-r.Ready():
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// Close stops the publisher: later Publish calls fail with [ErrClosed].
// It sends what is gathered and returns once every Result is ready and
// every goroutine the publisher started has exited.
//
// If ctx ends first, Close returns ctx.Err() and the shutdown carries on in
// the background; calling Close again waits for it again. Close is
// idempotent: once the shutdown has finished, it returns nil at once.
func (p *Publisher) Close(ctx context.Context) error {
	p.closeOnce.Do(func() {
		p.closeMu.Lock()
		p.closed = true
		p.closing.Store(true)
		p.closeMu.Unlock()
		go p.shutdown()
	})
	select {
	case <-p.done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// shutdown sends every lingering key, and waits for the senders, which
// exit once nothing is left to send.
func (p *Publisher) shutdown() {
	defer close(p.done)
	p.lingers.endAll(true)
	p.senders.Wait()
	p.rec.close()
}

// Topic returns the full name of the Publisher's topic,
// "projects/P/topics/T", whether [New] was given an ID or a full name: the
// name it publishes to, and that its logs and metrics carry.
func (p *Publisher) Topic() string { return p.topic }

// topicName returns the full name of topicID, an ID or a full name, in
// client's project, as the official client names it.
func topicName(client *pubsub.Client, topicID string) string {
	if strings.Contains(topicID, "/") {
		return topicID
	}
	return "projects/" + client.Project() + "/topics/" + topicID
}

package publisher

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/noop"

	"github.com/keyorder/keyorder/internal/telemetry"
)

// WithMeterProvider sets where the publisher reports its metrics (see the
// package documentation, Observability). The default is the global
// provider, otel.GetMeterProvider(), which does nothing until the
// application installs one with otel.SetMeterProvider; it is looked up by
// [New]. New returns an error matching [ErrInvalidConfig] if mp is nil.
func WithMeterProvider(mp metric.MeterProvider) Option {
	return func(c *config) error {
		if mp == nil {
			return fmt.Errorf("%w: WithMeterProvider(nil): leave the option out for the global provider", ErrInvalidConfig)
		}
		c.meterProvider = mp
		return nil
	}
}

// WithLogger sets the publisher's logger (see the package documentation,
// Observability). It logs a key's failure at Warn and its resume at Info,
// once each per episode of failures (a key publishing again ends one), and a key publishing faster than the service
// takes at Warn, once per episode: nothing per message. The default is
// slog.Default() as it is when [New] runs, so that failures are seen
// without setup. New returns an error matching [ErrInvalidConfig] if l is
// nil; slog.New(slog.DiscardHandler) logs nothing.
func WithLogger(l *slog.Logger) Option {
	return func(c *config) error {
		if l == nil {
			return fmt.Errorf("%w: WithLogger(nil): use slog.New(slog.DiscardHandler) to log nothing", ErrInvalidConfig)
		}
		c.logger = l
		return nil
	}
}

// A recorder turns the events a Publisher already has into metrics and
// logs: a message refused by Publish, a Result settled by its sender,
// a key paused by a failure and resumed, a key's message enqueued. Nothing
// else in the package measures or logs, so the hot path pays one call per
// event: with the default, no-op, meter provider, a few nanoseconds (see
// FIGURES.md, the publisher's metrics and logs).
//
// Metric attributes never carry a key, since keys are unbounded; logs do,
// since they are needed to act on a failure. Nothing is logged per message.
type recorder struct {
	log *slog.Logger // with the topic

	messages metric.Int64Counter
	duration metric.Float64Histogram
	hotKeys  metric.Int64Counter
	gauges   metric.Registration // nil if registering failed
	// pausedKeys counts the keys whose failed tail is being failed
	// (keyQueue.fail): increased and decreased by the sender that fails
	// it; read by the gauge's callback.
	pausedKeys atomic.Int64
	// episodes are the keys paused and not published since: a key's
	// first pause is logged, its later ones counted, and the publish that
	// ends them logged with their count.
	episodes episodes

	// The attribute sets, made once: a measurement costs no allocation.
	countAs [numOutcomes][]metric.AddOption
	timeAs  [numOutcomes][]metric.RecordOption
	hotAs   []metric.AddOption

	// The rate check (rate.go): a key that publishes more than limit
	// bytes within one window is hot. Set by New, or by tests before the
	// first Publish.
	window time.Duration
	limit  int64
	// clock, if set, replaces the monotonic clock of now: a hook for
	// tests, set before the first Publish.
	clock func() time.Duration
}

// The instruments' names, their attributes, and the attributes' values.
const (
	meterName = "github.com/keyorder/keyorder/publisher"

	metricMessages  = "keyorder.publisher.messages"
	metricPaused    = "keyorder.publisher.paused_keys"
	metricDuration  = "keyorder.publisher.publish.duration"
	metricHotKeys   = "keyorder.publisher.hot_keys"
	attrDestination = "messaging.destination.name" // OpenTelemetry's convention: the topic's full name
	attrOutcome     = "keyorder.outcome"
)

// An outcome is how a Result ended, as keyorder.publisher.messages counts
// it.
type outcome int

const (
	outPublished outcome = iota // the service took it
	outFailed                   // sent, and the service did not take it: a *PublishError, not Skipped
	outSkipped                  // failed with an earlier message of its key (P4): Skipped
	outInvalid                  // refused by Publish, nothing sent: validation, flow control, ErrClosed
	numOutcomes
)

var outcomeNames = [numOutcomes]string{"published", "failed", "skipped", "invalid"}

// clockStart is the origin of now: a monotonic reading of the clock fits a
// Result in 8 bytes as a duration since then.
var clockStart = time.Now()

// newRecorder returns the recorder of a Publisher on topic, a full name,
// with cfg's provider and logger, or the global ones as they are now.
func newRecorder(cfg *config, topic string) *recorder {
	log := cfg.logger
	if log == nil {
		log = slog.Default()
	}
	o := &recorder{
		log:    log.With(slog.String("topic", topic)),
		window: rateWindow,
		limit:  rateLimit * int64(rateWindow/time.Second),
	}
	m := telemetry.Meter(cfg.meterProvider, meterName)
	var errs []error
	check := func(err error) { errs = append(errs, err) }

	var err error
	o.messages, err = m.Int64Counter(metricMessages, metric.WithUnit("{message}"),
		metric.WithDescription("Messages given to Publish or Retry, by outcome, counted once each, before its Result is ready."))
	check(err)
	o.duration, err = m.Float64Histogram(metricDuration, metric.WithUnit("s"),
		metric.WithDescription("Time from Publish to its Result, by outcome, for the messages of a key that were queued."),
		metric.WithExplicitBucketBoundaries(telemetry.DurationBuckets...))
	check(err)
	o.hotKeys, err = m.Int64Counter(metricHotKeys, metric.WithUnit("{key}"),
		metric.WithDescription("Keys found publishing faster than the service's limit per ordering key, once per episode."))
	check(err)
	paused, err := m.Int64ObservableGauge(metricPaused, metric.WithUnit("{key}"),
		metric.WithDescription("Keys whose failed tail is being failed; a key resumes once it is."))
	check(err)

	dest := attribute.String(attrDestination, topic)
	observed := metric.WithAttributeSet(attribute.NewSet(dest))
	o.gauges, err = m.RegisterCallback(func(_ context.Context, ob metric.Observer) error {
		ob.ObserveInt64(paused, o.pausedKeys.Load(), observed)
		return nil
	}, paused)
	check(err)
	if err := errors.Join(errs...); err != nil {
		// The API hands back working instruments with its errors, but
		// guard against one that does not.
		log.Warn("keyorder/publisher: metrics", "error", err)
		if o.messages == nil {
			o.messages = noop.Int64Counter{}
		}
		if o.duration == nil {
			o.duration = noop.Float64Histogram{}
		}
		if o.hotKeys == nil {
			o.hotKeys = noop.Int64Counter{}
		}
	}
	for i, name := range outcomeNames {
		set := attribute.NewSet(dest, attribute.String(attrOutcome, name))
		o.countAs[i] = []metric.AddOption{metric.WithAttributeSet(set)}
		o.timeAs[i] = []metric.RecordOption{metric.WithAttributeSet(set)}
	}
	o.hotAs = []metric.AddOption{metric.WithAttributeSet(attribute.NewSet(dest))}
	return o
}

// close unregisters the gauge once the publisher has shut down.
func (o *recorder) close() {
	if o.gauges != nil {
		_ = o.gauges.Unregister()
	}
}

// now reads the monotonic clock, as a duration since clockStart.
func (o *recorder) now() time.Duration {
	if o.clock != nil {
		return o.clock()
	}
	return time.Since(clockStart)
}

// refuse fails r, which Publish did not send, with err, and counts it as
// invalid. A refused message takes no time worth a histogram: its Result
// is ready when Publish returns.
func (p *Publisher) refuse(r *Result, err error) *Result {
	p.rec.messages.Add(context.Background(), 1, p.rec.countAs[outInvalid]...)
	return r.fail(err)
}

// counted counts a message's outcome, without its time.
func (o *recorder) counted(out outcome) {
	o.messages.Add(context.Background(), 1, o.countAs[out]...)
}

// settled records r's outcome, at now, before its Result is made ready:
// whoever sees a Result ready sees it counted.
func (o *recorder) settled(r *Result, out outcome, now time.Duration) {
	o.messages.Add(context.Background(), 1, o.countAs[out]...)
	o.duration.Record(context.Background(), (now - r.start).Seconds(), o.timeAs[out]...)
}

// paused records that key's message failed with err and took tail, the
// key's later messages outstanding, with it (P4). The key resumes at once
// (P5), and its next message may fail as well, as every message of a
// key does while its topic is missing: only the first pause of an
// episode, which the key's next published message ends, is logged. The
// shard's mutex is held.
func (o *recorder) paused(key string, failed *Result, tail []*Result, err error) {
	now := o.now()
	o.settled(failed, outFailed, now)
	for _, r := range tail {
		o.settled(r, outSkipped, now)
	}
	o.pausedKeys.Add(1)
	if o.episodes.pause(key) {
		o.log.LogAttrs(context.Background(), slog.LevelWarn, "keyorder/publisher: key paused",
			slog.String("key", key), slog.Any("error", err), slog.Int("failed", 1+len(tail)))
	}
}

// resumed records that key's failed tail has been failed: the key takes
// messages again (P5), and the gauge counts it no more. Its episode goes
// on until a message of it is published. The shard's mutex is held.
func (o *recorder) resumed() {
	o.pausedKeys.Add(-1)
}

// published records that a request of key's messages was published, which
// ends the key's episode of pauses, if any, with a log of their count. The
// shard's mutex is held.
func (o *recorder) published(key string) {
	if pauses := o.episodes.end(key); pauses > 0 {
		o.log.LogAttrs(context.Background(), slog.LevelInfo, "keyorder/publisher: key resumed",
			slog.String("key", key), slog.Int("pauses", pauses))
	}
}

// maxEpisodes bounds the keys whose episode of pauses is remembered: a
// key whose later messages are never published leaves its entry behind
// (P7), so past this many the entries are forgotten, and a forgotten key
// that pauses again logs a new episode.
const maxEpisodes = 4096

// episodes counts the pauses of each key paused and not published since.
type episodes struct {
	open atomic.Int64 // len(keys), read without mu by end
	mu   sync.Mutex
	keys map[string]int // guarded by mu
}

// pause counts a pause of key, and reports whether it starts an episode.
func (e *episodes) pause(key string) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	if n, ok := e.keys[key]; ok {
		e.keys[key] = n + 1
		return false
	}
	if e.keys == nil || len(e.keys) >= maxEpisodes {
		e.keys = make(map[string]int)
	}
	e.keys[key] = 1
	e.open.Store(int64(len(e.keys)))
	return true
}

// end ends key's episode, and returns its count of pauses, 0 if it had
// none. With no episode open, as is usual, it costs an atomic load.
func (e *episodes) end(key string) int {
	if e.open.Load() == 0 {
		return 0
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	n, ok := e.keys[key]
	if ok {
		delete(e.keys, key)
		e.open.Store(int64(len(e.keys)))
	}
	return n
}

package engine

import (
	"context"
	"errors"
	"log/slog"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/noop"

	"github.com/keyorder/keyorder/internal/telemetry"
	"github.com/keyorder/keyorder/ordering"
)

// A recorder turns the events a Receive already has into metrics and logs:
// a job settled, a handler call ended, a key held or released, a callback
// that panicked. Nothing else in the package measures or logs, so the hot
// path pays one call per event: with the default, no-op, meter provider,
// a few nanoseconds (see BenchmarkReceive in FIGURES.md).
//
// Metric attributes never carry a key, since keys are unbounded; logs do,
// since they are needed to act on a hold. Nothing is logged per message
// at Info or above, except panics, which are bugs.
type recorder struct {
	Log *slog.Logger // with the subscription

	deliveries metric.Int64Counter
	// unverifiedStamps counts stamps refused for their signature
	// (takeStamp, job.go), and unverifiedAs is its attribute set.
	unverifiedStamps metric.Int64Counter
	unverifiedAs     []metric.AddOption
	duration         metric.Float64Histogram
	gauges           metric.Registration // nil if registering failed

	// The attribute sets, made once: a measurement costs no allocation.
	settledAs [NumOutcomes][]metric.AddOption
	calledAs  [3][]metric.RecordOption // by callOK, callError, callPanic

	// refused counts push requests refused since the last warning, and
	// refusedLogged is when that was, in Unix ns (pushRefused).
	refused       atomic.Int64
	refusedLogged atomic.Int64

	// unverifiedLog and gapLog space the Warns of refused stamps and of
	// certain gaps per key and producer (loglimit.go).
	unverifiedLog, gapLog *logLimit
}

// The instruments' names, their attributes, and the attributes' values.
const (
	meterName = "github.com/keyorder/keyorder/subscriber"

	metricDeliveries = "keyorder.subscriber.deliveries"
	metricUnverified = "keyorder.subscriber.unverified_stamps"
	metricDuration   = "keyorder.subscriber.handler.duration"
	metricHeldKeys   = "keyorder.subscriber.held_keys"
	metricQueued     = "keyorder.subscriber.queued"
	metricOldestAge  = "keyorder.subscriber.oldest_unacked.age"

	// attrSubscription is OpenTelemetry's semantic convention for the
	// subscription a consumer reads; its value is the full name.
	attrSubscription = "messaging.destination.subscription.name"
	attrOutcome      = "keyorder.outcome"
	// attrReason says why a delivery was nacked, or held.
	attrReason = "keyorder.reason"

	// Outcomes of keyorder.subscriber.handler.duration.
	callOK, callError, callPanic = 0, 1, 2
)

var callOutcomes = [3]string{"ok", "error", "panic"}

// A gaugeSource tells what the gauges report; Receive provides it (Engine.gauges).
type gaugeSource func() (held, queued int, oldest time.Duration)

// newRecorder returns the recorder of a Receive of s, whose gauges report
// what look returns while the Receive runs. close unregisters them.
func newRecorder(cfg *Config, name string, look gaugeSource) *recorder {
	log := cfg.Logger
	if log == nil {
		log = slog.Default() // resolved now, so that SetDefault before Receive counts
	}
	o := &recorder{Log: log.With(slog.String("subscription", name)),
		unverifiedLog: newLogLimit(time.Hour), gapLog: newLogLimit(time.Minute)}
	m := telemetry.Meter(cfg.MeterProvider, meterName)
	var errs []error
	check := func(err error) { errs = append(errs, err) }

	var err error
	o.deliveries, err = m.Int64Counter(metricDeliveries, metric.WithUnit("{delivery}"),
		metric.WithDescription("Messages settled by Receive, by outcome; the deliveries of a message that arrived while it was here are settled with it, and counted once."))
	check(err)
	o.unverifiedStamps, err = m.Int64Counter(metricUnverified, metric.WithUnit("{delivery}"),
		metric.WithDescription("Deliveries whose stamp's signature was missing or wrong (WithStampKey): run as unstamped."))
	check(err)
	o.duration, err = m.Float64Histogram(metricDuration, metric.WithUnit("s"),
		metric.WithDescription("Duration of handler calls, by outcome."),
		metric.WithExplicitBucketBoundaries(telemetry.DurationBuckets...))
	check(err)
	held, err := m.Int64ObservableGauge(metricHeldKeys, metric.WithUnit("{key}"),
		metric.WithDescription("Keys waiting on a failed message: for its retry, or held until the service brings it back."))
	check(err)
	queued, err := m.Int64ObservableGauge(metricQueued, metric.WithUnit("{delivery}"),
		metric.WithDescription("Deliveries received and waiting for their turn, failed messages waiting for a retry included."))
	check(err)
	age, err := m.Float64ObservableGauge(metricOldestAge, metric.WithUnit("s"),
		metric.WithDescription("Age of the oldest delivery this process holds: queued, running or waiting for a retry; 0 when none."))
	check(err)

	sub := attribute.String(attrSubscription, name)
	observed := metric.WithAttributeSet(attribute.NewSet(sub))
	o.gauges, err = m.RegisterCallback(func(_ context.Context, ob metric.Observer) error {
		h, q, a := look()
		ob.ObserveInt64(held, int64(h), observed)
		ob.ObserveInt64(queued, int64(q), observed)
		ob.ObserveFloat64(age, a.Seconds(), observed)
		return nil
	}, held, queued, age)
	check(err)
	if err := errors.Join(errs...); err != nil {
		// The API hands back working instruments with its errors, but
		// guard against one that does not.
		log.Warn("keyorder/subscriber: metrics", "error", err)
		if o.deliveries == nil {
			o.deliveries = noop.Int64Counter{}
		}
		if o.duration == nil {
			o.duration = noop.Float64Histogram{}
		}
		if o.unverifiedStamps == nil {
			o.unverifiedStamps = noop.Int64Counter{}
		}
	}

	for out := range NumOutcomes {
		kv := []attribute.KeyValue{sub, attribute.String(attrOutcome, out.String())}
		if out.Reason() != "" {
			kv = append(kv, attribute.String(attrReason, out.Reason()))
		}
		o.settledAs[out] = []metric.AddOption{metric.WithAttributeSet(attribute.NewSet(kv...))}
	}
	o.unverifiedAs = []metric.AddOption{observed}
	for i, c := range callOutcomes {
		o.calledAs[i] = []metric.RecordOption{metric.WithAttributeSet(attribute.NewSet(sub, attribute.String(attrOutcome, c)))}
	}
	return o
}

// close unregisters the gauges when the Receive ends.
func (o *recorder) close() {
	if o.gauges != nil {
		_ = o.gauges.Unregister()
	}
}

// settled records that a delivery was settled with out.
func (o *recorder) settled(out Outcome) {
	o.deliveries.Add(context.Background(), 1, o.settledAs[out]...)
}

// messageFailed logs that j's message failed for good, with its last
// error, whatever the door and the failure policy: deadLettered is set
// when it is nacked on its last delivery, which the service forwards to
// the dead-letter topic.
func (o *recorder) messageFailed(j *Job, deadLettered bool) {
	o.Log.LogAttrs(j.ctxOr(), slog.LevelWarn, "keyorder/subscriber: message failed for good", logFailure(j, deadLettered)...)
}

// handled records a handler call of j, judged v. A panic is logged with
// its stack, at Error; an error at Debug, since a failure for good is
// logged when it is settled.
func (o *recorder) handled(j *Job, v Verdict) {
	if v.Err == nil {
		o.duration.Record(context.Background(), v.took.Seconds(), o.calledAs[callOK]...)
		return
	}
	o.failedCall(j, v.took, v.Err)
}

// failedCall is handled for a call that failed. Apart, so that pe, which
// escapes, costs no allocation to calls that succeed.
func (o *recorder) failedCall(j *Job, d time.Duration, err error) {
	var pe *PanicError
	if errors.As(err, &pe) {
		o.duration.Record(context.Background(), d.Seconds(), o.calledAs[callPanic]...)
		o.Log.LogAttrs(j.Ctx, slog.LevelError, "keyorder/subscriber: handler panicked",
			slog.String("key", j.D.Key), slog.String("message_id", j.D.ID), slog.Int("attempt", j.D.Attempt),
			slog.Any("panic", pe.Value), slog.String("stack", string(pe.Stack)))
		return
	}
	o.duration.Record(context.Background(), d.Seconds(), o.calledAs[callError]...)
	level := slog.LevelDebug
	if errors.Is(err, ErrHandlerExited) {
		level = slog.LevelError // a bug, as a panic is
	}
	if o.Log.Enabled(j.Ctx, level) {
		o.Log.LogAttrs(j.Ctx, level, "keyorder/subscriber: handler failed",
			slog.String("key", j.D.Key), slog.String("message_id", j.D.ID), slog.Int("attempt", j.D.Attempt),
			slog.Any("error", err))
	}
}

// keyEvent logs a hold, at Warn, and its end, at Info.
func (o *recorder) keyEvent(ev KeyEvent) {
	attrs := []slog.Attr{
		slog.String("key", ev.Key), slog.String("message_id", ev.MessageID), slog.Int("attempt", ev.Attempt),
	}
	switch ev.Kind {
	case KeyHeld:
		o.Log.LogAttrs(context.Background(), slog.LevelWarn, "keyorder/subscriber: key held",
			append(attrs, slog.Any("error", ev.Err))...)
	case KeyReleased:
		o.Log.LogAttrs(context.Background(), slog.LevelInfo, "keyorder/subscriber: key released",
			append(attrs, slog.String("reason", ev.Reason), slog.Duration("since_failure", ev.At.Sub(ev.Since)))...)
	case KeyParked:
		o.Log.LogAttrs(context.Background(), slog.LevelWarn, "keyorder/subscriber: key parked",
			append(attrs, slog.Any("error", ev.Err))...)
	case KeyUnparked:
		// The message that parked the key ran in the release; its calls
		// before the park are not kept, so no attempt is logged.
		o.Log.LogAttrs(context.Background(), slog.LevelInfo, "keyorder/subscriber: key unparked",
			slog.String("key", ev.Key), slog.String("message_id", ev.MessageID),
			slog.Duration("parked_for", ev.At.Sub(ev.Since)))
	}
}

// shutdownCut logs that a shutdown stopped waiting for the official
// client, whose requests the server did not answer in time (see
// ShutdownBound).
func (o *recorder) shutdownCut() {
	o.Log.LogAttrs(context.Background(), slog.LevelWarn, "keyorder/subscriber: the server did not answer the shutdown in time; Receive returns without waiting for the official client")
}

// callbackPanicked logs a panic in a user callback (WithErrorHandler,
// WithKeyEvents), once, with its stack.
func (o *recorder) callbackPanicked(what string, v any, stack []byte) {
	o.Log.LogAttrs(context.Background(), slog.LevelError, "keyorder/subscriber: "+what+" panicked",
		slog.Any("panic", v), slog.String("stack", string(stack)))
}

// sequenceGap logs a jump in a producer's sequence numbers for a key:
// first to last are missing. It is the one call the check of per-key
// sequence numbers makes when it finds one: at Warn, once a minute at
// most per key and producer, with the count of those held back since (at
// Debug); at Info when the gap is uncertain (Gap.Uncertain), since a key
// that moved to another client and back shows one on every rebalance;
// and at Debug when it is only the start of a sequence seen here after
// its first number (sequenceStart), as every pair shows after a restart.
func (o *recorder) sequenceGap(ctx context.Context, key, producer string, first, last uint64, uncertain bool) {
	o.gap(ctx, key, producer, first, last, uncertain, false)
}

// sequenceStart logs, at Debug, the numbers before the first one this
// Receive saw of a producer's sequence for a key: an uncertain gap.
func (o *recorder) sequenceStart(ctx context.Context, key, producer string, first, last uint64) {
	o.gap(ctx, key, producer, first, last, true, true)
}

func (o *recorder) gap(ctx context.Context, key, producer string, first, last uint64, uncertain, start bool) {
	level := slog.LevelWarn
	var since int64
	switch {
	case start:
		level = slog.LevelDebug
	case uncertain:
		level = slog.LevelInfo
	default:
		var ok bool
		if ok, since = o.gapLog.allow(key, producer); !ok {
			level = slog.LevelDebug
		}
	}
	if !o.Log.Enabled(ctx, level) {
		return
	}
	attrs := []slog.Attr{slog.String("key", key), slog.String("producer", producer),
		slog.String("first_missing", ordering.FormatSeq(first)), slog.String("last_missing", ordering.FormatSeq(last)),
		slog.Bool("uncertain", uncertain)}
	if since > 0 {
		attrs = append(attrs, slog.Int64("suppressed_since_last_warning", since))
	}
	o.Log.LogAttrs(ctx, level, "keyorder/subscriber: sequence gap", attrs...)
}

// pushRefused logs a push request refused before the handler ran: a bad
// or missing token, another account's, or a body that is not a push of
// this subscription. It is either a misconfiguration or someone who
// should not be calling, so it is logged at Warn, but once a minute at
// most, with the count refused since: anyone who finds the URL could
// otherwise flood the log. The others go to Debug.
func (o *recorder) pushRefused(ctx context.Context, status int, err error) {
	n := o.refused.Add(1)
	now := time.Now().UnixNano()
	if last := o.refusedLogged.Load(); now-last >= int64(time.Minute) && o.refusedLogged.CompareAndSwap(last, now) {
		o.refused.Add(-n)
		o.Log.LogAttrs(ctx, slog.LevelWarn, "keyorder/subscriber: push request refused",
			slog.Int("status", status), slog.Any("error", err), slog.Int64("refused_since_last_warning", n))
		return
	}
	if o.Log.Enabled(ctx, slog.LevelDebug) {
		o.Log.LogAttrs(ctx, slog.LevelDebug, "keyorder/subscriber: push request refused",
			slog.Int("status", status), slog.Any("error", err))
	}
}

// sequenceDuplicate logs a message whose producer, key and sequence number
// were processed already under another message ID, as a publish retried
// after a lost response stores: it is acked unrun. The first of a run of
// copies of one key and producer is logged at Info, as it is harmless and
// as rare as lost publish responses; the rest of the run, which a request
// of many messages stored twice brings, at Debug.
func (o *recorder) sequenceDuplicate(ctx context.Context, first bool, key, producer string, seq uint64, id string) {
	level := slog.LevelDebug
	if first {
		level = slog.LevelInfo
	}
	o.Log.LogAttrs(ctx, level, "keyorder/subscriber: duplicate sequence number",
		slog.String("key", key), slog.String("producer", producer), slog.String("seq", ordering.FormatSeq(seq)),
		slog.String("message_id", id))
}

// sequenceRerun logs a message run though it may have run before: a bound
// of the sequence window was reached, and what it forgot runs rather than
// being taken for a copy (S12). At Info: a duplicate run, not a loss.
func (o *recorder) sequenceRerun(ctx context.Context, key, producer string, seq uint64, id string) {
	o.Log.LogAttrs(ctx, slog.LevelInfo, "keyorder/subscriber: sequence number may have run before",
		slog.String("key", key), slog.String("producer", producer), slog.String("seq", ordering.FormatSeq(seq)),
		slog.String("message_id", id))
}

// stampUnverified counts a stamp refused for its signature, and logs it at
// Warn once per producer and key, again at most hourly while it goes on,
// with the count refused since: someone publishes with a producer's ID
// and no key, or a producer signs with a key this subscriber lacks.
func (o *recorder) stampUnverified(ctx context.Context, key string, st ordering.Stamp, id string, err error) {
	o.unverifiedStamps.Add(ctx, 1, o.unverifiedAs...)
	if ok, since := o.unverifiedLog.allow(key, st.Producer); ok {
		o.Log.LogAttrs(ctx, slog.LevelWarn, "keyorder/subscriber: stamp signature not verified; message run as unstamped",
			slog.String("key", key), slog.String("producer", st.Producer), slog.String("seq", ordering.FormatSeq(st.Seq)),
			slog.String("message_id", id), slog.Any("error", err), slog.Int64("suppressed_since_last_warning", since))
	}
}

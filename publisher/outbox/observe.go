package outbox

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
)

// The instruments' names. Every data point carries the outbox's producer
// ID, one per outbox, never a key.
const (
	meterName = "github.com/keyorder/keyorder/publisher/outbox"

	metricPublished = "keyorder.outbox.published"
	metricResent    = "keyorder.outbox.resent"
	metricFailed    = "keyorder.outbox.failed"
	metricInvalid   = "keyorder.outbox.invalid"
	metricPending   = "keyorder.outbox.pending"
	metricLag       = "keyorder.outbox.lag"
	metricShards    = "keyorder.outbox.shards"
	attrProducer    = "keyorder.producer"
)

// Stats counts what a [Relay] did since it was made, over all its runs.
type Stats struct {
	Published int64 // events the service took, copies included
	// Resent counts events sent that had been sent before (after a
	// failure, a restart, a lease taken over): copies, if the earlier send
	// was stored. A lower bound: a takeover that commits during the old
	// owner's mark can leave one run's re-send uncounted.
	Resent int64
	Failed int64 // events whose publish failed, left for a later round
	// Invalid counts the rows found that the relay cannot publish: a key
	// set aside for a bad row (once per episode), and rows given back
	// the shard of their key.
	Invalid int64
	Shards  int   // shards the relay holds now
	Pending int64 // events pending in its shards, when it last looked
}

// A recorder turns a relay's events into metrics, logs and [Stats]: a
// batch settled, a key failed and recovered, a lease round.
type recorder struct {
	log *slog.Logger

	published, resent, failed, invalid metric.Int64Counter
	// gauges registers the gauges' callback and returns what
	// unregisters it: Run does both, so that a Relay that no longer
	// runs, a Relay has no Close, leaves nothing in the provider.
	gauges func() (unregister func())
	as     metric.MeasurementOption

	nPublished, nResent, nFailed, nInvalid atomic.Int64
	shards, pending                        atomic.Int64
	oldest                                 atomic.Int64 // unix nanoseconds of the oldest pending event; 0 for none
}

func newRecorder(cfg *relayConfig, producer string) *recorder {
	log := cfg.logger
	if log == nil {
		log = slog.Default()
	}
	o := &recorder{log: log.With(slog.String("producer", producer))}
	o.as = metric.WithAttributeSet(attribute.NewSet(attribute.String(attrProducer, producer)))
	m := telemetry.Meter(cfg.meterProvider, meterName)
	var errs []error
	counter := func(name, desc string) metric.Int64Counter {
		c, err := m.Int64Counter(name, metric.WithUnit("{event}"), metric.WithDescription(desc))
		errs = append(errs, err)
		if c == nil {
			return noop.Int64Counter{}
		}
		return c
	}
	o.published = counter(metricPublished, "Events the service took from the relay, copies included.")
	o.resent = counter(metricResent, "Events sent again: after a failure, a restart or a lease taken over. Subscribers see copies (S12).")
	o.failed = counter(metricFailed, "Events whose publish failed; they stay in the outbox for a later round (P4).")
	o.invalid = counter(metricInvalid, "Rows the relay cannot publish as they are: a key set aside for a bad row, once per episode, and rows of no shard given their key's.")
	pending, err1 := m.Int64ObservableGauge(metricPending, metric.WithUnit("{event}"),
		metric.WithDescription("Events waiting in the outbox, in the shards this relay holds, when it last looked."))
	lag, err2 := m.Float64ObservableGauge(metricLag, metric.WithUnit("s"),
		metric.WithDescription("Age of the oldest event waiting in the shards this relay holds."))
	shards, err3 := m.Int64ObservableGauge(metricShards, metric.WithUnit("{shard}"),
		metric.WithDescription("Shards whose lease this relay holds."))
	errs = append(errs, err1, err2, err3)
	if err := errors.Join(errs...); err != nil {
		log.Warn("keyorder/outbox: metrics", "error", err)
	}
	o.gauges = func() func() { return func() {} }
	if pending != nil && lag != nil && shards != nil {
		cb := o.observe(pending, lag, shards)
		o.gauges = func() func() {
			reg, err := m.RegisterCallback(cb, pending, lag, shards)
			if err != nil || reg == nil {
				return func() {}
			}
			return func() { _ = reg.Unregister() }
		}
	}
	return o
}

func (o *recorder) observe(pending metric.Int64ObservableGauge, lag metric.Float64ObservableGauge, shards metric.Int64ObservableGauge) metric.Callback {
	as := o.as.(metric.ObserveOption)
	return func(_ context.Context, ob metric.Observer) error {
		ob.ObserveInt64(pending, o.pending.Load(), as)
		ob.ObserveFloat64(lag, o.lag().Seconds(), as)
		ob.ObserveInt64(shards, o.shards.Load(), as)
		return nil
	}
}

// lag is the age of the oldest pending event, 0 for none.
func (o *recorder) lag() time.Duration {
	oldest := o.oldest.Load()
	if oldest == 0 {
		return 0
	}
	return max(0, time.Since(time.Unix(0, oldest)))
}

// sent counts a batch's events handed to the publisher that had been sent
// before.
func (o *recorder) sent(again int) {
	if again > 0 {
		o.nResent.Add(int64(again))
		o.resent.Add(context.Background(), int64(again), o.as.(metric.AddOption))
	}
}

// settled counts a batch's published and failed events.
func (o *recorder) settled(ok, failed int) {
	if ok > 0 {
		o.nPublished.Add(int64(ok))
		o.published.Add(context.Background(), int64(ok), o.as.(metric.AddOption))
	}
	if failed > 0 {
		o.nFailed.Add(int64(failed))
		o.failed.Add(context.Background(), int64(failed), o.as.(metric.AddOption))
	}
}

// looked records a lease round's view of the relay's shards.
func (o *recorder) looked(shards int, pending, oldest int64) {
	o.shards.Store(int64(shards))
	o.pending.Store(pending)
	o.oldest.Store(oldest)
}

// keyFailed logs the first failure of key's episode.
func (o *recorder) keyFailed(key string, seq int64, err error, kept int) {
	o.log.LogAttrs(context.Background(), slog.LevelWarn, "keyorder/outbox: key failed",
		slog.String("key", key), slog.Int64("seq", seq), slog.Any("error", err), slog.Int("kept", kept))
}

// keyRecovered logs the success that ends key's episode of failures.
func (o *recorder) keyRecovered(key string, failures int) {
	o.log.LogAttrs(context.Background(), slog.LevelInfo, "keyorder/outbox: key recovered",
		slog.String("key", key), slog.Int("failures", failures))
}

// badRow logs and counts the first bad row of key's episode: the key is
// set aside, and read again after a backoff.
func (o *recorder) badRow(key, seq, why string) {
	o.nInvalid.Add(1)
	o.invalid.Add(context.Background(), 1, o.as.(metric.AddOption))
	o.log.LogAttrs(context.Background(), slog.LevelWarn, "keyorder/outbox: bad row",
		slog.String("key", key), slog.String("seq", seq), slog.String("reason", why))
}

// reshard counts n rows of key whose shard was out of range, now their
// key's.
func (o *recorder) reshard(key string, n int64) {
	o.nInvalid.Add(n)
	o.invalid.Add(context.Background(), n, o.as.(metric.AddOption))
	o.log.LogAttrs(context.Background(), slog.LevelWarn, "keyorder/outbox: rows given their shard",
		slog.String("key", key), slog.Int64("rows", n))
}

// dbFailed logs a statement of the relay's that the database refused; the
// relay tries again on its next round.
func (o *recorder) dbFailed(op string, err error) {
	o.log.LogAttrs(context.Background(), slog.LevelWarn, "keyorder/outbox: database error",
		slog.String("op", op), slog.Any("error", err))
}

// takenOver logs the shards a lease round took from a relay whose lease
// ran out.
func (o *recorder) takenOver(shards []int, from string) {
	o.log.LogAttrs(context.Background(), slog.LevelInfo, "keyorder/outbox: shards taken over",
		slog.Any("shards", shards), slog.String("from", from))
}

func (o *recorder) stats() Stats {
	return Stats{
		Published: o.nPublished.Load(), Resent: o.nResent.Load(), Failed: o.nFailed.Load(), Invalid: o.nInvalid.Load(),
		Shards: int(o.shards.Load()), Pending: o.pending.Load(),
	}
}

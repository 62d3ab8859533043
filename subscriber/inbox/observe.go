package inbox

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
	"github.com/keyorder/keyorder/subscriber"
)

// Stats are an Inbox's counts since [New], of what this process saw: the
// table holds what every replica did.
type Stats struct {
	// Applied counts messages applied in order: the next of a (key,
	// producer), number 1 for the first, or the message after a gap.
	Applied int64
	// Adopted counts, within Applied, the first messages of a (key,
	// producer) that started its record above number 1, as published
	// before the inbox was made (see the package doc).
	Adopted int64
	// Copies counts messages found applied already, here or by another
	// replica, and acked unapplied.
	Copies int64
	// Gaps counts the gaps this process recorded as owed, and Owed the
	// numbers in them.
	Gaps, Owed int64
	// LateApplied counts owed numbers applied when they came.
	LateApplied int64
	// GapWaits counts the calls answered with a RetryAfter while a
	// message waited for the numbers missing before it.
	GapWaits int64
	// Unstamped counts messages without a key or a stamp: applied
	// without a record with WithUnstampedAtLeastOnce, refused otherwise.
	Unstamped int64
}

// The instruments' names and attributes.
const (
	meterName      = "github.com/keyorder/keyorder/subscriber/inbox"
	metricMessages = "keyorder.inbox.messages"
	metricMissing  = "keyorder.inbox.missing"
	// attrTable names the inbox's table, which tells inboxes apart.
	attrTable   = "keyorder.inbox.table"
	attrOutcome = "keyorder.outcome"

	// Outcomes of keyorder.inbox.messages.
	outcomeApplied   = "applied"
	outcomeCopy      = "copy"
	outcomeLate      = "late"      // an owed number, applied
	outcomeGapWait   = "gap_wait"  // a call answered RetryAfter
	outcomeUnstamped = "unstamped" // applied without a record
	outcomeRefused   = "refused"   // unstamped, ErrUnstamped
)

// recorder counts, measures and logs what an Inbox does.
type recorder struct {
	log      *slog.Logger
	messages metric.Int64Counter
	missing  metric.Int64Counter
	table    attribute.KeyValue
	counts   struct {
		applied, adopted, copies, gaps, owed, late, waits, unstamped atomic.Int64
	}
}

func newRecorder(cfg config) *recorder {
	log := cfg.logger
	if log == nil {
		log = slog.Default()
	}
	o := &recorder{log: log.With(slog.String("table", cfg.table)), table: attribute.String(attrTable, cfg.table)}
	m := telemetry.Meter(cfg.meterProvider, meterName)
	var err1, err2 error
	o.messages, err1 = m.Int64Counter(metricMessages, metric.WithUnit("{message}"),
		metric.WithDescription("Calls of the inbox's handler, by outcome: applied, copy (acked unapplied), late (an owed number applied), gap_wait, unstamped, refused."))
	o.missing, err2 = m.Int64Counter(metricMissing, metric.WithUnit("{message}"),
		metric.WithDescription("Sequence numbers recorded as owed, missing before a message that was applied after its gap's wait."))
	if err := errors.Join(err1, err2); err != nil {
		log.Warn("keyorder/subscriber: inbox metrics", "error", err)
		if o.messages == nil {
			o.messages = noop.Int64Counter{}
		}
		if o.missing == nil {
			o.missing = noop.Int64Counter{}
		}
	}
	return o
}

func (o *recorder) count(ctx context.Context, outcome string) {
	o.messages.Add(ctx, 1, metric.WithAttributes(o.table, attribute.String(attrOutcome, outcome)))
}

func (o *recorder) applied(ctx context.Context) {
	o.counts.applied.Add(1)
	o.count(ctx, outcomeApplied)
}

// adopted logs a first number above 1 taken for the start, as published
// before the table was made; applied counts it.
func (o *recorder) adopted(ctx context.Context, d *subscriber.Delivery, made time.Time) {
	o.counts.adopted.Add(1)
	o.log.InfoContext(ctx, "keyorder/subscriber: inbox adopted a producer that published before it was made",
		"key", d.Key, "producer", d.Producer, "seq", ordering.FormatSeq(d.Seq), "message_id", d.ID,
		"published", d.PublishTime, "made", made)
}

func (o *recorder) copied(ctx context.Context, d *subscriber.Delivery) {
	o.counts.copies.Add(1)
	o.count(ctx, outcomeCopy)
	o.log.DebugContext(ctx, "keyorder/subscriber: inbox copy acked unapplied",
		"key", d.Key, "producer", d.Producer, "seq", ordering.FormatSeq(d.Seq), "message_id", d.ID)
}

func (o *recorder) lateApplied(ctx context.Context, d *subscriber.Delivery) {
	o.counts.late.Add(1)
	o.count(ctx, outcomeLate)
	o.log.InfoContext(ctx, "keyorder/subscriber: inbox applied an owed number",
		"key", d.Key, "producer", d.Producer, "seq", ordering.FormatSeq(d.Seq), "message_id", d.ID)
}

// waiting counts a gap's wait, and logs the call that began it.
func (o *recorder) waiting(ctx context.Context, d *subscriber.Delivery, began bool) {
	o.counts.waits.Add(1)
	o.count(ctx, outcomeGapWait)
	if began {
		o.log.InfoContext(ctx, "keyorder/subscriber: inbox waits for missing numbers",
			"key", d.Key, "producer", d.Producer, "seq", ordering.FormatSeq(d.Seq), "message_id", d.ID)
	}
}

func (o *recorder) gap(ctx context.Context, g subscriber.Gap, waited time.Duration) {
	n := int64(g.To - g.From + 1)
	o.counts.gaps.Add(1)
	o.counts.owed.Add(n)
	o.missing.Add(ctx, n, metric.WithAttributes(o.table))
	o.log.WarnContext(ctx, "keyorder/subscriber: inbox gap recorded as owed",
		"key", g.Key, "producer", g.Producer, "first_missing", ordering.FormatSeq(g.From),
		"last_missing", ordering.FormatSeq(g.To), "message_id", g.MessageID, "waited", waited)
}

func (o *recorder) unstampedApplied(ctx context.Context) {
	o.counts.unstamped.Add(1)
	o.count(ctx, outcomeUnstamped)
}

func (o *recorder) refused(ctx context.Context) {
	o.counts.unstamped.Add(1)
	o.count(ctx, outcomeRefused)
}

func (o *recorder) stats() Stats {
	c := &o.counts
	return Stats{
		Applied: c.applied.Load(), Adopted: c.adopted.Load(), Copies: c.copies.Load(), Gaps: c.gaps.Load(), Owed: c.owed.Load(),
		LateApplied: c.late.Load(), GapWaits: c.waits.Load(), Unstamped: c.unstamped.Load(),
	}
}

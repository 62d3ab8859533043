package subscriber

import (
	"log/slog"
	"time"

	"cloud.google.com/go/pubsub/v2"
	"go.opentelemetry.io/otel/metric"

	"github.com/keyorder/keyorder/internal/resource"
	"github.com/keyorder/keyorder/ordering"

	"github.com/keyorder/keyorder/subscriber/internal/engine"
)

// Defaults of the options.
const (
	// DefaultWorkers is the handler calls that run at once when neither
	// WithWorkers nor the receive settings' MaxOutstandingMessages says:
	// the official client's default for the latter.
	DefaultWorkers        = 1000
	DefaultPartitions     = 1 << 16
	DefaultKeyBacklog     = 32
	DefaultMaxAttempts    = 5
	DefaultMinBackoff     = 100 * time.Millisecond
	DefaultMaxBackoff     = 5 * time.Second
	DefaultDrainTimeout   = 10 * time.Second
	DefaultDedupWindow    = 10_000
	DefaultRedeliveryWait = time.Minute
)

// An Option configures a [Subscription]. Options are checked once, in
// [CreateWithTopic] or [Open].
type Option func(*config) error

// WithWorkers sets how many handler calls run at once (S9). Keys take
// turns on them: a key with a delivery ready waits for a free worker,
// oldest first, and a key waiting for a retry holds none. A slow handler
// therefore holds one worker, not its neighbours. A worker is a goroutine
// started when needed; an idle one costs its stack.
//
// The default follows the official client: the receive settings'
// MaxOutstandingMessages ([WithReceiveSettings]), which is 1000 by default
// ([DefaultWorkers] when it is 0 or sets no limit), so that every message
// the service may hand over can be in a handler at once, as with the
// official client's Receive. That suits handlers that wait on I/O (a
// database write, an HTTP call), which most do: their calls overlap, and
// the bound is the service's window, not the CPU. For handlers that keep a
// CPU busy, more calls than cores only share the cores: n of about
// runtime.GOMAXPROCS(0) to twice that does the same work with less
// contention and memory. Order never depends on n: a key's messages run
// one at a time whatever it is. n must be at least 1.
func WithWorkers(n int) Option {
	return checked(n >= 1, func(c *config) { c.Workers = n }, "WithWorkers(%d): need at least 1", n)
}

// followOutstanding is the default of WithWorkers: the official client's
// bound on messages outstanding, or DefaultWorkers when it has none (n <= 0:
// 0 means its default, a negative n no limit).
func followOutstanding(n int) int {
	if n > 0 {
		return n
	}
	return DefaultWorkers
}

// WithPartitions sets how many partitions keys are hashed to, with
// [ordering.Partition] (S3). The deliveries of one partition never run at
// once, so a slow handler delays the keys that share its partition: with
// the default, [DefaultPartitions], few do. Fewer partitions only make
// sense to bound concurrency per group of keys. n is 1 to 65,536.
func WithPartitions(n int) Option {
	return checked(n >= 1 && n <= DefaultPartitions, func(c *config) { c.Partitions = n },
		"WithPartitions(%d): need 1 to %d", n, DefaultPartitions)
}

// WithKeyBacklog sets how many deliveries of one key may wait for their
// turn here whatever else the subscription holds (S10). Past that, a key's
// deliveries are queued only while the subscription holds less than half
// of its flow-control window (the official client's MaxOutstandingMessages
// and MaxOutstandingBytes); otherwise they are nacked, and the service
// sends them again later, in order, so that a slow, failing or held key
// cannot fill the window and starve the other keys. On a subscription
// without a retry policy the service sends a nacked message back at once,
// about every 100 ms while the key has no room. The default is
// [DefaultKeyBacklog]; n must be at least 1.
func WithKeyBacklog(n int) Option {
	return checked(n >= 1, func(c *config) { c.KeyBacklog = n }, "WithKeyBacklog(%d): need at least 1", n)
}

// WithMaxAttempts sets how many failed handler calls of a message, counted
// across its deliveries, make it fail for good (S5). Until then, a failed
// call is retried after a backoff while its key waits; then the failure
// policy applies. [Permanent] errors apply it at once, and [RetryAfter]
// errors do not count. 1 means no retry. The default is
// [DefaultMaxAttempts]; n must be at least 1.
func WithMaxAttempts(n int) Option {
	return checked(n >= 1, func(c *config) { c.MaxAttempts = n }, "WithMaxAttempts(%d): need at least 1", n)
}

// WithBackoff sets keyorder's own, in-process retry, not the service's
// redelivery (that is [WithRetryPolicy]): the wait before each retry of a
// failed message that Receive makes itself, min after the first failure,
// doubling up to max. While a message waits, its key's later messages
// wait behind it, but no worker is held: other keys run meanwhile (S5). A
// message that failed for good waits this backoff too before its call on
// each later delivery. It takes effect on every Receive, of a
// subscription created or opened. The defaults are [DefaultMinBackoff]
// and [DefaultMaxBackoff]; 0 < min <= max.
func WithBackoff(min, max time.Duration) Option {
	return checked(min > 0 && max >= min, func(c *config) { c.MinBackoff, c.MaxBackoff = min, max },
		"WithBackoff(%v, %v): need 0 < min <= max", min, max)
}

// WithDrainTimeout bounds how long Receive lets running handlers finish
// after its context ends (S7). At the timeout their context is cancelled,
// and Receive waits for them to return. Receive returns within d plus
// [ShutdownBound], whatever the server does. The default is
// [DefaultDrainTimeout]; d must not be negative.
func WithDrainTimeout(d time.Duration) Option {
	return checked(d >= 0, func(c *config) { c.DrainTimeout = d }, "WithDrainTimeout(%v): negative", d)
}

// WithDedupWindow sets how many processed message IDs Receive remembers,
// so that a message coming back after it was processed (a redelivered
// tail, a lost ack, an expired lease, a duplicate) is acked without calling
// the handler again (S6). Each remembered ID costs about 100 bytes. The
// default is [DefaultDedupWindow]; 0 turns deduplication off: no delivery
// is skipped as a copy, neither by its ID nor by its stamp (see
// [WithSequenceWindow]), and the handler sees every delivery the service
// makes. Gaps are still reported.
//
// A message replayed on purpose by seeking the subscription back is also
// skipped while its ID is in the window.
func WithDedupWindow(n int) Option {
	return checked(n >= 0, func(c *config) { c.DedupWindow = n }, "WithDedupWindow(%d): negative", n)
}

// WithRedeliveryWait bounds how long a key stays held after a failed
// message was nacked, waiting for that message, and the tail the hold
// sent back with it, to come back (S5). While the key is held, its other
// deliveries are nacked without running; those sent back are kept as they
// come back, and run once all have, in the order this Receive first
// received them, whatever order the server sends them back in (Google's
// emulator sends only what was nacked, in the order of the nack request).
// The service redelivers a nacked message before any later message of its
// key, so the hold only has to outlast the deliveries already on their
// way; the bound matters when the messages come back to another client of
// the subscription instead, or not at all: the key shows as held
// ([Subscription.HeldKeys], KeyHeld) all the while, and then goes on with
// what came back, in order (KeyReleased, [ReasonLapsed]). The default is
// [DefaultRedeliveryWait]; d must be positive.
func WithRedeliveryWait(d time.Duration) Option {
	return checked(d > 0, func(c *config) { c.RedeliveryWait = d },
		"WithRedeliveryWait(%v): need a positive wait", d)
}

// WithReceiveSettings sets the official client's receive settings: flow
// control, lease extension and streams. The default is
// pubsub.DefaultReceiveSettings. ShutdownOptions must be nil: keyorder
// drains by its own rules (see [WithDrainTimeout]).
func WithReceiveSettings(s pubsub.ReceiveSettings) Option {
	return checked(s.ShutdownOptions == nil, func(c *config) { c.Receive = s },
		"WithReceiveSettings: ShutdownOptions must be nil; use WithDrainTimeout")
}

// WithErrorHandler sets a function called with every failed handler call,
// panics included, before it is retried or nacked; d.Attempt tells which
// call it was. It runs on the worker that ran the call, and should not
// block. A panic in it is recovered and logged, and the message is
// settled all the same (S11). The default does nothing.
func WithErrorHandler(f func(d *Delivery, err error)) Option {
	return setting(func(c *config) { c.OnError = f })
}

// WithKeyEvents sets a function told when a key is held and when its hold
// ends (S5), and, with [WithParking], when this process parks a key or a
// release unparks it, for alerting or logs (see [KeyEventKind]). It is
// called once per event, after the deliveries involved are settled, on the
// goroutine that settled them, and should not block. A panic in it is
// recovered and logged. The default does nothing; [Subscription.HeldKeys]
// lists the keys held at any time, and [Subscription.Parked] the parked
// ones.
func WithKeyEvents(f func(KeyEvent)) Option {
	return setting(func(c *config) { c.OnKeyEvent = f })
}

// DefaultSequenceWindow is the default of [WithSequenceWindow].
const DefaultSequenceWindow = 10_000

// WithSequenceWindow sets how many producers' sequences, one per key and
// producer, Receive remembers to check stamped messages (see [Gap] and
// [Delivery.Seq]): a delivery whose number its producer's sequence for the
// key has processed already is a copy, acked without calling the handler,
// even under a new message ID; a number past the next is a gap, reported
// to [WithGapHandler]. The least recently active sequences are forgotten
// first, so idle keys do not pile up; each costs about 166 bytes plus its
// key and producer ID. A sequence forgotten and seen again starts over:
// a copy of a message processed before it was forgotten runs again,
// unless its ID is still in [WithDedupWindow]'s window. The default is
// [DefaultSequenceWindow]; 0 turns the checks off. [WithDedupWindow](0)
// turns off the skipping of copies, and leaves the gap reports.
func WithSequenceWindow(n int) Option {
	return checked(n >= 0, func(c *config) { c.SeqWindow = n }, "WithSequenceWindow(%d): negative", n)
}

// WithUnorderedRedelivery tells Receive that the server may deliver a
// key's earlier message after a later one, as Google's emulator and
// pstest redeliver nacked and expired messages: one by one, in nack
// order. It is on by itself when PUBSUB_EMULATOR_HOST is set.
//
// The service delivers a key's messages in publish order, and sends a
// key's tail again in order, so a stamped number below the first one a
// Receive saw of its (key, producer) is a copy of a message processed
// before, and is acked unrun (S12). On a server that redelivers out of
// order it may be a message never processed: with this option it runs,
// counted in [Stats].Rerun and logged as a number that may run a second
// time, and only a number processed in this Receive is a copy. And a
// stamped delivery that arrives while later numbers of its producer wait
// in its key's lane goes before them, running at once if the first of
// them waits for a retry; on the service, a lower number that arrives
// later is a copy, and keeps its place.
func WithUnorderedRedelivery() Option {
	return setting(func(c *config) { c.AnyOrder = true })
}

// WithGapHandler sets a function told of every gap Receive finds in a
// producer's sequence for a key: numbers never processed here, before a
// message about to be processed, which then is processed as usual. Each
// gap is reported once, on the goroutine that ran the message, once the
// message's call has been decided and settled: so nothing f does, not
// even exiting its goroutine, changes what becomes of the message. f
// should not block. A panic in it is recovered and logged. The default
// does nothing; [Stats.Gaps] and [Stats.UncertainGaps] count gaps anyway.
//
// A gap means the numbers were not stored (their publish failed, and the
// messages, if republished, got new numbers), were dead-lettered, or went
// to another client of the subscription: with several clients, a key that
// moves between them shows here the numbers the others processed. Such a
// gap, seen after the key had nothing here, is uncertain ([Gap.Uncertain]):
// logged at Info and counted in [Stats.UncertainGaps] rather than
// [Stats.Gaps]. A certain gap is logged at Warn once a minute at most per
// key and producer. With several clients, the authority on what is
// missing is a store they share (package inbox), not these counts.
func WithGapHandler(f func(engine.Gap)) Option {
	return setting(func(c *config) { c.OnGap = f })
}

// DefaultQuietPeriod is the default of [WithQuietPeriod].
const DefaultQuietPeriod = 10 * time.Second

// WithQuietPeriod sets how long [Replay] waits, with nothing in its range
// left to process, for the service to send more before it decides it has
// caught up: Replay returns once, for d, no message published in its range
// has arrived or finished processing. The service reports no backlog and
// promises no order across keys, so a message it holds back for longer
// than d is missed; a longer d costs that much more at the end of every
// Replay. It should outlast the time the service takes to open a stream
// and start sending, again after a broken stream: seconds, on the service.
// Receive ignores it. The default is [DefaultQuietPeriod]; d must be
// positive.
func WithQuietPeriod(d time.Duration) Option {
	return checked(d > 0, func(c *config) { c.quiet = d }, "WithQuietPeriod(%v): need a positive period", d)
}

// WithMeterProvider sets where Receive reports its metrics (see the
// package documentation, Observability). The default is the global
// provider, otel.GetMeterProvider(), which does nothing until the
// application installs one with otel.SetMeterProvider; it is looked up
// when Receive starts. mp must not be nil.
func WithMeterProvider(mp metric.MeterProvider) Option {
	return checked(mp != nil, func(c *config) { c.MeterProvider = mp },
		"WithMeterProvider(nil): leave the option out for the global provider")
}

// WithLogger sets the logger of Receive (see the package documentation,
// Observability). It logs holds, parks, failures for good and sequence
// gaps at Warn, releases and unparks at Info, panics of handlers and
// callbacks at Error with their stack, the first of a run of copies found
// by their stamps at Info and the rest at Debug, and each failed call at
// Debug: nothing per message at Info. The default is
// slog.Default() as it is when Receive starts, so that holds and panics
// are seen without setup. l must not be nil; slog.New(slog.DiscardHandler)
// logs nothing.
func WithLogger(l *slog.Logger) Option {
	return checked(l != nil, func(c *config) { c.Logger = l },
		"WithLogger(nil): use slog.New(slog.DiscardHandler) to log nothing")
}

// WithDeadLetterPolicy asks the service to forward a message to the topic
// topicID (an ID or a full name) once it has been delivered
// maxDeliveryAttempts times, when [CreateWithTopic] creates the
// subscription; it creates that topic too if it is missing. On Google Cloud
// the project's Pub/Sub service account must be allowed to publish to the
// topic and to subscribe to the subscription. The service dead-letters on a
// best-effort basis and keeps no order: the key goes on without the
// message (see FIGURES.md on hold, dead-lettering and parking, and
// [WithParking], which wins when both are set). It matters only at
// creation: an existing subscription keeps its own policy
// ([Subscription.DeadLetterPolicy]), and CreateWithTopic and [Open] log a
// difference at Warn. By default the subscription has none.
// maxDeliveryAttempts is 5 to 100, as the service requires.
func WithDeadLetterPolicy(topicID string, maxDeliveryAttempts int) Option {
	if err := resource.Topic(topicID); err != nil {
		return checked(false, nil, "WithDeadLetterPolicy: %v", err)
	}
	return checked(maxDeliveryAttempts >= minDeadLetterAttempts && maxDeliveryAttempts <= maxDeadLetterAttempts,
		func(c *config) {
			c.policies.deadLetterTopic, c.policies.maxDeliveryAttempts = topicID, maxDeliveryAttempts
		},
		"WithDeadLetterPolicy(%q, %d): need %d to %d delivery attempts", topicID, maxDeliveryAttempts, minDeadLetterAttempts, maxDeadLetterAttempts)
}

// WithRetryPolicy sets the service's redelivery, not keyorder's own
// in-process retry (that is [WithBackoff]): Pub/Sub waits between min and
// max, growing with each attempt, before it sends a nacked message again.
// It matters only at creation: [CreateWithTopic] sets it on a
// subscription it creates; an existing subscription keeps its own policy
// ([Subscription.RetryPolicy]), and CreateWithTopic and [Open] log a
// difference at Warn. It spaces out the nacks of a held key (S5) and of
// keys without room (S10), which without a retry policy come back at
// once, and the pushes of a failed message. By default the subscription
// has none. 0 <= min <= max <= 600 s, as the service requires.
func WithRetryPolicy(min, max time.Duration) Option {
	return checked(min >= 0 && max >= min && max <= maxRetryBackoff,
		func(c *config) { c.policies.retry, c.policies.minBackoff, c.policies.maxBackoff = true, min, max },
		"WithRetryPolicy(%v, %v): need 0 <= min <= max <= %v", min, max, maxRetryBackoff)
}

// WithTopicRetention makes [CreateWithTopic] create a missing topic with
// message retention d: the topic keeps every message for d, acknowledged
// or not, so that [Replay] can read it back and a subscription can be
// sought back over it. It matters only at creation: an existing topic
// keeps its own retention, and CreateWithTopic and [Open] (which creates
// nothing) log a difference at Warn when the Subscription is made. By default a topic is created without
// retention, as the service does, and Replay then returns
// [ErrNoRetention]. d is 10 minutes to 31 days, as the service requires.
// Retention is billed by the service as storage.
func WithTopicRetention(d time.Duration) Option {
	return checked(d >= minTopicRetention && d <= maxTopicRetention, func(c *config) { c.topicRetention = d },
		"WithTopicRetention(%v): need %v to %v", d, minTopicRetention, maxTopicRetention)
}

// The bounds the service puts on a topic's message retention.
const (
	minTopicRetention = 10 * time.Minute
	maxTopicRetention = 31 * 24 * time.Hour
)

// WithExactlyOnceDelivery makes [CreateWithTopic] create the subscription
// with exactly-once delivery on. It matters only at creation: an existing
// subscription keeps its own setting, which cannot be changed after
// creation any more than ordering ([Subscription.ExactlyOnce] reports it),
// and CreateWithTopic and [Open] log at Warn when it lacks what the option
// asks. The default is off.
func WithExactlyOnceDelivery() Option {
	return setting(func(c *config) { c.exactlyOnce = true })
}

// WithStampKey makes the subscriber verify every stamp against keys, any
// of which may have signed it, so that a key can be rotated: give the
// subscribers the new key beside the old, then switch the publishers
// (publisher.WithStampKey, the relay's outbox.WithStampKey) to the new
// one, then drop the old here. Each key is at least
// [ordering.MinStampKeyBytes] (16) bytes; use 32 random bytes. No key, or
// a short one, is an [ErrInvalidConfig]. The default verifies nothing:
// stamps are trusted as written, as before signatures existed.
//
// Turn it on only once every producer of the subscription's topic signs:
// an unsigned stamp of an honest producer is then not a stamp either, and
// its copies are no longer found by their numbers.
func WithStampKey(keys ...[]byte) Option {
	k, err := ordering.NewStampKeys(keys...)
	return checked(err == nil, func(c *config) { c.StampKeys = k }, "WithStampKey: %w", err)
}

package publisher

import (
	"fmt"
	"log/slog"

	"cloud.google.com/go/pubsub/v2"
	"go.opentelemetry.io/otel/metric"

	"github.com/keyorder/keyorder/ordering"
)

// An Option configures a [Publisher]. Options are checked once, in [New].
type Option func(*config) error

type config struct {
	defaultKey    string
	settings      pubsub.PublishSettings
	batchBounds   bool                 // set by WithPublishSettings: its thresholds bound each request
	noStamps      bool                 // WithoutStamps (stamp.go)
	producerID    string               // WithProducerID (stamp.go)
	stampKey      []byte               // WithStampKey (stamp.go); nil: unsigned
	meterProvider metric.MeterProvider // nil: the global one (observe.go)
	logger        *slog.Logger         // nil: slog.Default()
}

// WithDefaultOrderingKey sets the publisher's default ordering key: the key
// of every message that names none in its call or its [ordering.Header]
// header (P1). The default is "", which publishes such messages unordered.
//
// Every message without a key of its own then shares this one key, and
// with it the key's limits: one batch in flight at a time (P3), and about
// 1 MB/s of publishing, the service's limit per ordering key (P6). A
// publisher whose messages mostly name no key is then as fast as one key.
// Set a default only when those messages really need one order; otherwise
// give each message the key of what it is about (a customer, an account),
// or none. The publisher logs a warning, and counts it in
// keyorder.publisher.hot_keys, when a key publishes more than 5 MB within
// 5 s (see the package documentation, Observability).
//
// New returns an error matching [ErrInvalidConfig], and
// [ordering.ErrKeyTooLong] or [ordering.ErrKeyNotUTF8], if key is not a
// valid ordering key.
func WithDefaultOrderingKey(key string) Option {
	return func(c *config) error {
		if err := ordering.Validate(key); err != nil {
			return fmt.Errorf("%w: WithDefaultOrderingKey: %w", ErrInvalidConfig, err)
		}
		c.defaultKey = key
		return nil
	}
}

// WithPublishSettings sets the publisher's batching, timeout and flow
// control, in the official client's type. Without it, a key's requests
// carry up to the service's limits, 1,000 messages and 10 MB, a lingering
// key waits at most 5 ms, requests time out after 60 s, at most 100
// requests per connection of the client are in flight, and there is no
// flow control (see the package documentation, Batching).
//
// With it, the fields apply as in the official client:
//
//   - CountThreshold and ByteThreshold bound each request, as the
//     official client's bundles, and send a lingering key once its
//     messages reach either; 0 means the service's limit.
//   - DelayThreshold caps a key's linger, at most 5 ms: the publisher
//     sends a key once about 1 ms passes without a Publish call, which
//     is sooner than a fixed delay. 0 sends every key at once.
//   - Timeout bounds each request, its retries included; 0 means none.
//   - NumGoroutines bounds the requests in flight, instead of 100 per
//     connection.
//   - EnableCompression compresses with gzip a request whose messages
//     are more than CompressionBytesThreshold bytes.
//   - FlowControlSettings, as below.
//
// BufferedByteLimit does not apply: flow control bounds what is
// outstanding.
//
// Flow control is applied by the publisher, so that a message refused by
// flow control fails alone and its key stays open: with
// FlowControlBlock, Publish blocks until the message fits or its ctx
// ends; with FlowControlSignalError, it fails at once with
// pubsub.ErrFlowControllerMaxOutstandingMessages or
// pubsub.ErrFlowControllerMaxOutstandingBytes. A MaxOutstandingMessages of
// 0 or less means 1000, and a MaxOutstandingBytes of 0 or less means no
// byte limit, as in the official client. A message's room is released when
// it is done, not in publish order, so a slow or retrying message holds
// only its own room (P8).
//
// New returns an error matching [ErrInvalidConfig] for HedgingSettings,
// which the official client does not allow with message ordering, and for
// negative thresholds, timeout or goroutine count, or an unknown
// LimitExceededBehavior. A CountThreshold above
// pubsub.MaxPublishRequestCount is lowered to it.
func WithPublishSettings(s pubsub.PublishSettings) Option {
	return func(c *config) error {
		invalid := func(what string, v any) error {
			return fmt.Errorf("%w: WithPublishSettings: %s %v is negative", ErrInvalidConfig, what, v)
		}
		switch {
		case s.HedgingSettings != nil:
			return fmt.Errorf("%w: WithPublishSettings: hedging cannot be used with ordering keys", ErrInvalidConfig)
		case s.CountThreshold < 0:
			return invalid("CountThreshold", s.CountThreshold)
		case s.ByteThreshold < 0:
			return invalid("ByteThreshold", s.ByteThreshold)
		case s.DelayThreshold < 0:
			return invalid("DelayThreshold", s.DelayThreshold)
		case s.Timeout < 0:
			return invalid("Timeout", s.Timeout)
		case s.NumGoroutines < 0:
			return invalid("NumGoroutines", s.NumGoroutines)
		}
		switch b := s.FlowControlSettings.LimitExceededBehavior; b {
		case pubsub.FlowControlIgnore, pubsub.FlowControlBlock, pubsub.FlowControlSignalError:
		default:
			return fmt.Errorf("%w: WithPublishSettings: unknown LimitExceededBehavior %d", ErrInvalidConfig, b)
		}
		s.CountThreshold = min(s.CountThreshold, pubsub.MaxPublishRequestCount)
		c.settings = s
		c.batchBounds = true
		return nil
	}
}

// A PublishOption configures one call to [Publisher.Publish]. It is a small
// value rather than a function, so that passing one costs no allocation.
type PublishOption struct {
	key   string
	after *Result
}

// WithOrderingKey sets the message's ordering key. It takes precedence over
// the message's [ordering.Header] header and the publisher's default (P1).
// An empty key has no effect.
func WithOrderingKey(key string) PublishOption {
	return PublishOption{key: key}
}

// WithAfter makes the message follow prev, the Result of an earlier
// message of the same key, whatever happens to prev: if prev has failed
// when Publish is called, the message is not sent, and its Result fails
// at once with prev's cause, as its tail does (a [*PublishError] with
// Skipped set); if prev is still pending, the message is in prev's tail
// and fails with it (P4).
//
// A run of a key's messages, each published WithAfter the one before, so
// never has a later message reach the topic after an earlier one that
// failed. Without it, a message of the run published just after its
// predecessor's failure was reported is sent once the key resumes (P5),
// after the failed one: out of order, if the caller then publishes the
// failed one again, as publisher/outbox's relay does with a failed run.
//
// For a prev of another key, or of none, the check is made when Publish
// is called, and promises no more. A nil prev has no effect.
func WithAfter(prev *Result) PublishOption {
	return PublishOption{after: prev}
}

package engine

import (
	"log/slog"
	"time"

	"cloud.google.com/go/pubsub/v2"
	"go.opentelemetry.io/otel/metric"

	"github.com/keyorder/keyorder/internal/backoff"
	"github.com/keyorder/keyorder/ordering"
)

// Config is what the engine runs by: the values of the options
// that govern a delivery's way, checked once, by newConfig.
type Config struct {
	Workers        int
	Partitions     int
	KeyBacklog     int
	MaxAttempts    int
	MinBackoff     time.Duration
	MaxBackoff     time.Duration
	DrainTimeout   time.Duration
	DedupWindow    int
	RedeliveryWait time.Duration
	Receive        pubsub.ReceiveSettings // the official client's; the room (S10) follows its flow control
	OnError        func(d *Delivery, err error)
	OnKeyEvent     func(KeyEvent)
	SeqWindow      int                  // sequence.go
	AnyOrder       bool                 // sequence.go: WithUnorderedRedelivery
	StampKeys      *ordering.StampKeys  // job.go: nil verifies nothing
	OnGap          func(Gap)            // sequence.go
	MeterProvider  metric.MeterProvider // nil: the global one, when Receive starts
	Logger         *slog.Logger         // nil: slog.Default(), when Receive starts
}

// Facts are what the engine knows of its subscription, from when it
// was made.
type Facts struct {
	Name                        string // projects/P/subscriptions/S
	Ordered, ExactlyOnce, Parks bool   // Parks: with WithParking
	DeadLetterAttempts          int    // its dead-letter limit, 0 without a policy
	Counts                      *Counters
	// Range is the span a Replay reads; nil, off Replay, reads every message.
	Range *Range
}

// Backoff is the wait before the next call of a message after its
// failures-th counted failure: WithBackoff's min, doubling up to its max.
func (c *Config) Backoff(failures int) time.Duration {
	return backoff.Doubling(c.MinBackoff, c.MaxBackoff, failures)
}

// Log returns the logger WithLogger set, or slog.Default() as it is now,
// for what is logged outside Receive's recorder: when a Subscription is
// made, and by parking.
func (c *Config) Log() *slog.Logger {
	if c.Logger != nil {
		return c.Logger
	}
	return slog.Default()
}

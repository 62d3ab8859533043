package subscriber

import (
	"errors"
	"fmt"
	"time"

	"cloud.google.com/go/pubsub/v2"
)

// Defaults of the options.
const (
	DefaultWorkers        = 8
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

type config struct {
	workers        int
	queueSize      int // 0: the workers package's default
	maxAttempts    int
	minBackoff     time.Duration
	maxBackoff     time.Duration
	drainTimeout   time.Duration
	dedupWindow    int
	redeliveryWait time.Duration
	receive        pubsub.ReceiveSettings
	onError        func(d *Delivery, err error)
}

func newConfig(opts []Option) (config, error) {
	c := config{
		workers:        DefaultWorkers,
		maxAttempts:    DefaultMaxAttempts,
		minBackoff:     DefaultMinBackoff,
		maxBackoff:     DefaultMaxBackoff,
		drainTimeout:   DefaultDrainTimeout,
		dedupWindow:    DefaultDedupWindow,
		redeliveryWait: DefaultRedeliveryWait,
		receive:        pubsub.DefaultReceiveSettings,
	}
	for _, opt := range opts {
		if err := opt(&c); err != nil {
			return config{}, err
		}
	}
	return c, nil
}

// WithWorkers sets the number of worker partitions that deliveries are
// hashed to by key (S3), which is also the most handlers that run at once.
// The default is [DefaultWorkers]; n must be at least 1.
func WithWorkers(n int) Option {
	return func(c *config) error {
		if n < 1 {
			return fmt.Errorf("keyorder/subscriber: WithWorkers(%d): need at least 1", n)
		}
		c.workers = n
		return nil
	}
}

// WithQueueSize sets how many deliveries each partition queues before the
// official client is made to wait. The default is that of the workers
// package; n must be at least 1.
func WithQueueSize(n int) Option {
	return func(c *config) error {
		if n < 1 {
			return fmt.Errorf("keyorder/subscriber: WithQueueSize(%d): need at least 1", n)
		}
		c.queueSize = n
		return nil
	}
}

// WithMaxAttempts sets how many times the handler is called for one
// delivery before it is nacked (S5); 1 means no retry in place. The
// default is [DefaultMaxAttempts]; n must be at least 1.
func WithMaxAttempts(n int) Option {
	return func(c *config) error {
		if n < 1 {
			return fmt.Errorf("keyorder/subscriber: WithMaxAttempts(%d): need at least 1", n)
		}
		c.maxAttempts = n
		return nil
	}
}

// WithBackoff sets the wait before each retry in place: min before the
// second call, doubling up to max. A retry waits on its partition, so it
// delays the other keys of that partition too. The defaults are
// [DefaultMinBackoff] and [DefaultMaxBackoff]; 0 < min <= max.
func WithBackoff(min, max time.Duration) Option {
	return func(c *config) error {
		if min <= 0 || max < min {
			return fmt.Errorf("keyorder/subscriber: WithBackoff(%v, %v): need 0 < min <= max", min, max)
		}
		c.minBackoff, c.maxBackoff = min, max
		return nil
	}
}

// WithDrainTimeout bounds how long Receive lets running handlers finish
// after its context ends (S7). At the timeout their context is cancelled,
// and Receive waits for them to return. The default is
// [DefaultDrainTimeout]; d must not be negative.
func WithDrainTimeout(d time.Duration) Option {
	return func(c *config) error {
		if d < 0 {
			return fmt.Errorf("keyorder/subscriber: WithDrainTimeout(%v): negative", d)
		}
		c.drainTimeout = d
		return nil
	}
}

// WithDedupWindow sets how many processed message IDs Receive remembers,
// so that a message coming back after it was processed (a redelivered
// tail, a lost ack, an expired lease, a duplicate) is acked without calling
// the handler again (S6). Each remembered ID costs about 100 bytes. The
// default is [DefaultDedupWindow]; 0 turns the check off.
//
// A message replayed on purpose by seeking the subscription back is also
// skipped while its ID is in the window.
func WithDedupWindow(n int) Option {
	return func(c *config) error {
		if n < 0 {
			return fmt.Errorf("keyorder/subscriber: WithDedupWindow(%d): negative", n)
		}
		c.dedupWindow = n
		return nil
	}
}

// WithRedeliveryWait bounds how long a key stays held after a failed
// message was nacked, waiting for that message to come back (S5). While the
// key is held, its deliveries other than the failed message are nacked
// without running. The service redelivers a nacked message before any
// later message of its key, so the hold only has to outlast the deliveries
// already on their way; the bound matters when the message comes back to
// another client of the subscription instead. The default is
// [DefaultRedeliveryWait]; d must be positive.
func WithRedeliveryWait(d time.Duration) Option {
	return func(c *config) error {
		if d <= 0 {
			return fmt.Errorf("keyorder/subscriber: WithRedeliveryWait(%v): need a positive wait", d)
		}
		c.redeliveryWait = d
		return nil
	}
}

// WithReceiveSettings sets the official client's receive settings: flow
// control, lease extension and streams. The default is
// pubsub.DefaultReceiveSettings. ShutdownOptions must be nil: keyorder
// drains by its own rules (see [WithDrainTimeout]).
func WithReceiveSettings(s pubsub.ReceiveSettings) Option {
	return func(c *config) error {
		if s.ShutdownOptions != nil {
			return errors.New("keyorder/subscriber: WithReceiveSettings: ShutdownOptions must be nil; use WithDrainTimeout")
		}
		c.receive = s
		return nil
	}
}

// WithErrorHandler sets a function called with every failed handler call,
// panics included, before it is retried or nacked; d.Attempt tells which
// call it was. It runs on the partition's goroutine and must not block.
// The default does nothing.
func WithErrorHandler(f func(d *Delivery, err error)) Option {
	return func(c *config) error {
		c.onError = f
		return nil
	}
}

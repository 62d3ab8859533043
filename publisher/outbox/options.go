package outbox

import (
	"fmt"
	"log/slog"
	"time"

	"go.opentelemetry.io/otel/metric"

	"github.com/keyorder/keyorder/ordering"
)

// A RelayOption configures a [Relay]. Options are checked once, in
// [NewRelay].
type RelayOption func(*relayConfig) error

type relayConfig struct {
	batch         int
	inflight      int // events in flight at most: inflightPerBatch batches
	stampKeys     *ordering.StampKeys
	listener      Listener
	poll          time.Duration
	lease         time.Duration
	drain         time.Duration
	meterProvider metric.MeterProvider // nil: the global one
	logger        *slog.Logger         // nil: slog.Default()
}

func defaultRelayConfig() relayConfig {
	return relayConfig{batch: 500, inflight: 500 * inflightPerBatch, poll: 50 * time.Millisecond, lease: 10 * time.Second, drain: 10 * time.Second}
}

// inflightPerBatch is how many reads' worth of events a relay keeps in
// flight at most.
const inflightPerBatch = 20

// WithBatchSize sets how many events a relay reads in one query, across
// its keys; a read goes on, page after page, while there is room, and the
// relay keeps at most 20 times as many in flight. The first page of a
// pass takes up to that room, so that a backlog is read in one query. A
// key's events are published behind those of it in flight, so a page's
// bound holds no key back. The default is 500; n must be 1 to 10,000.
func WithBatchSize(n int) RelayOption {
	return func(c *relayConfig) error {
		if n < 1 || n > 10_000 {
			return fmt.Errorf("%w: WithBatchSize(%d): want 1 to 10000", ErrInvalidConfig, n)
		}
		c.batch = n
		c.inflight = n * inflightPerBatch
		return nil
	}
}

// WithStampKey makes the relay sign every stamp it writes with key
// ([ordering.StampKeys], the [ordering.SignatureAttribute] attribute), so
// that subscribers holding the key take only the outbox's stamps. [Outbox.Add]
// counts the signature's size ([ordering.SignatureSize]) whether or not
// relays sign. By default stamps are not signed. key must be at least
// [ordering.MinStampKeyBytes] long; NewRelay returns an error matching
// [ErrInvalidConfig] otherwise.
func WithStampKey(key []byte) RelayOption {
	return func(c *relayConfig) error {
		k, err := ordering.NewStampKeys(key)
		if err != nil {
			return fmt.Errorf("%w: WithStampKey: %w", ErrInvalidConfig, err)
		}
		c.stampKeys = k
		return nil
	}
}

// WithListener makes the relay read as soon as l says events may have
// been committed, in any process (see [Listener]), rather than at its
// next poll. Without it, a relay wakes at once only for the events added
// through its own [Outbox] in its own process, and polls for the rest.
// With it, on PostgreSQL, the relay waits for the notification of the
// commit of its own process's [Outbox.Add] too, rather than look for it
// while the writer's transaction lasts.
// NewRelay returns an error matching [ErrInvalidConfig] if l is nil.
func WithListener(l Listener) RelayOption {
	return func(c *relayConfig) error {
		if l == nil {
			return fmt.Errorf("%w: WithListener(nil): leave the option out to poll", ErrInvalidConfig)
		}
		c.listener = l
		return nil
	}
}

// WithPollInterval sets how long a relay goes without reading before it
// looks for events unwoken; it is woken by [Outbox.Add] of its own Outbox
// in its process, and by a [WithListener]. An event committed elsewhere,
// without a listener, is published within about this long. Each look is
// one indexed query. The default is 50 ms; d must be 1 ms to 1 min.
func WithPollInterval(d time.Duration) RelayOption {
	return func(c *relayConfig) error {
		if d < time.Millisecond || d > time.Minute {
			return fmt.Errorf("%w: WithPollInterval(%v): want 1ms to 1m", ErrInvalidConfig, d)
		}
		c.poll = d
		return nil
	}
}

// WithLease sets how long a relay's hold on a shard lasts without being
// renewed; it renews every third of it. A relay that dies holds its
// shards this long, after which the others take them over. The clocks of
// the relays' hosts must agree to well within d; a skew can only cause
// re-sends, which are copies. The default is 10 s; d must be 100 ms to
// 10 min.
func WithLease(d time.Duration) RelayOption {
	return func(c *relayConfig) error {
		if d < 100*time.Millisecond || d > 10*time.Minute {
			return fmt.Errorf("%w: WithLease(%v): want 100ms to 10m", ErrInvalidConfig, d)
		}
		c.lease = d
		return nil
	}
}

// WithDrainTimeout sets how long [Relay.Run], once its context ends,
// waits for the results of what it published, to delete those events
// rather than leave them to be sent again. The default is 10 s; d must
// be 0 to 5 min.
func WithDrainTimeout(d time.Duration) RelayOption {
	return func(c *relayConfig) error {
		if d < 0 || d > 5*time.Minute {
			return fmt.Errorf("%w: WithDrainTimeout(%v): want 0 to 5m", ErrInvalidConfig, d)
		}
		c.drain = d
		return nil
	}
}

// WithMeterProvider sets where the relay reports its metrics (see the
// package documentation, Observability). The default is the global
// provider, otel.GetMeterProvider(), looked up by [NewRelay]. NewRelay
// returns an error matching [ErrInvalidConfig] if mp is nil.
func WithMeterProvider(mp metric.MeterProvider) RelayOption {
	return func(c *relayConfig) error {
		if mp == nil {
			return fmt.Errorf("%w: WithMeterProvider(nil): leave the option out for the global provider", ErrInvalidConfig)
		}
		c.meterProvider = mp
		return nil
	}
}

// WithLogger sets the relay's logger. It logs a key's failure at Warn
// and its recovery at Info, once each per failure, a database error at
// Warn, and shards taken over from a relay whose lease ran out at Info:
// nothing per event. The default is slog.Default() as it is when
// [NewRelay] runs. NewRelay returns an error matching [ErrInvalidConfig]
// if l is nil.
func WithLogger(l *slog.Logger) RelayOption {
	return func(c *relayConfig) error {
		if l == nil {
			return fmt.Errorf("%w: WithLogger(nil): use slog.New(slog.DiscardHandler) to log nothing", ErrInvalidConfig)
		}
		c.logger = l
		return nil
	}
}

package outbox

import (
	"fmt"
	"log/slog"
	"time"

	"go.opentelemetry.io/otel/metric"
)

// A RelayOption configures a [Relay]. Options are checked once, in
// [NewRelay].
type RelayOption func(*relayConfig) error

type relayConfig struct {
	batch         int
	poll          time.Duration
	lease         time.Duration
	drain         time.Duration
	meterProvider metric.MeterProvider // nil: the global one
	logger        *slog.Logger         // nil: slog.Default()
}

func defaultRelayConfig() relayConfig {
	return relayConfig{batch: 500, poll: 50 * time.Millisecond, lease: 10 * time.Second, drain: 10 * time.Second}
}

// WithBatchSize sets how many events a relay reads in one query, across
// its keys; it keeps at most four times as many in flight. The default is
// 500; n must be 1 to 10,000.
func WithBatchSize(n int) RelayOption {
	return func(c *relayConfig) error {
		if n < 1 || n > 10_000 {
			return fmt.Errorf("%w: WithBatchSize(%d): want 1 to 10000", ErrInvalidConfig, n)
		}
		c.batch = n
		return nil
	}
}

// WithPollInterval sets how long a relay that found nothing to publish
// waits before it looks again: an event committed to an idle outbox is
// published within about this long. Each look is one indexed query. The
// default is 50 ms; d must be 1 ms to 1 min.
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

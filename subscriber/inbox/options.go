package inbox

import (
	"fmt"
	"log/slog"
	"regexp"
	"time"

	"go.opentelemetry.io/otel/metric"

	"github.com/keyorder/keyorder/subscriber"
)

// config holds the settings New validates once.
type config struct {
	table         string
	gapWait       time.Duration
	onGap         func(subscriber.Gap)
	unstamped     bool // apply unstamped messages without a record
	logger        *slog.Logger
	meterProvider metric.MeterProvider
}

func defaultConfig() config {
	return config{table: DefaultTable, gapWait: DefaultGapWait}
}

// DefaultTable is the name of the inbox's table unless [WithTable] says
// otherwise; the owed numbers are in the table of that name with the
// suffix "_owed".
const DefaultTable = "keyorder_inbox"

// DefaultGapWait is how long a message after a gap waits for the missing
// numbers unless [WithGapWait] says otherwise.
const DefaultGapWait = 10 * time.Second

// maxGapWait bounds WithGapWait: a key held for longer than the service's
// longest ack deadline is a key stuck, not waiting.
const maxGapWait = 10 * time.Minute

// An Option configures an [Inbox]. Options are validated once, by [New].
type Option func(*config) error

// tableRE is what WithTable accepts: a plain SQL identifier, which both
// dialects take unquoted, short enough for the "_owed" suffix.
var tableRE = regexp.MustCompile(`^[a-z_][a-z0-9_]{0,46}$`)

// WithTable names the inbox's table, instead of [DefaultTable], so that
// two inboxes share a database: two services that consume one topic into
// one database each need their own record of what they applied. name is
// 1 to 47 lower-case letters, digits and underscores, not starting with a
// digit.
func WithTable(name string) Option {
	return func(c *config) error {
		if !tableRE.MatchString(name) {
			return fmt.Errorf("%w: WithTable(%q): want 1 to 47 of [a-z0-9_], not starting with a digit", ErrInvalidConfig, name)
		}
		c.table = name
		return nil
	}
}

// WithGapWait sets how long a message after a gap in its producer's
// numbers for its key waits for the missing ones before the inbox records
// them as owed and applies it. While it waits, its handler returns
// subscriber.RetryAfter (wrapping [ErrGapWait]), which holds only its key
// and costs no attempt (S5). The wait is measured from the first time any
// replica found the gap, as the store records it. The default is
// [DefaultGapWait], 10 s; d is in [0, 10 min], and 0 applies at once.
func WithGapWait(d time.Duration) Option {
	return func(c *config) error {
		if d < 0 || d > maxGapWait {
			return fmt.Errorf("%w: WithGapWait(%v) outside [0, %v]", ErrInvalidConfig, d, maxGapWait)
		}
		c.gapWait = d
		return nil
	}
}

// WithGapHandler sets a function told of every gap the inbox records as
// owed, once, by the replica that records it, after its transaction has
// committed. It runs on the handler's goroutine: a panic in it is the
// handler's, and the message, applied already, is then a copy when it is
// called again. By default gaps are only logged and counted.
func WithGapHandler(f func(subscriber.Gap)) Option {
	return func(c *config) error {
		if f == nil {
			return fmt.Errorf("%w: WithGapHandler(nil): leave the option out", ErrInvalidConfig)
		}
		c.onGap = f
		return nil
	}
}

// WithUnstampedAtLeastOnce makes the handler apply a message without a key
// or a stamp in a transaction of its own, without a record: at least once,
// since nothing tells its copies apart. Such messages are counted in
// [Stats.Unstamped]. By default they are refused with [ErrUnstamped].
func WithUnstampedAtLeastOnce() Option {
	return func(c *config) error {
		c.unstamped = true
		return nil
	}
}

// WithLogger sets the inbox's logger. It logs a gap recorded as owed at
// Warn, an owed number applied at Info, and copies at Debug. The default
// is slog.Default() as it is when [New] is called.
func WithLogger(l *slog.Logger) Option {
	return func(c *config) error {
		if l == nil {
			return fmt.Errorf("%w: WithLogger(nil): use slog.New(slog.DiscardHandler) to log nothing", ErrInvalidConfig)
		}
		c.logger = l
		return nil
	}
}

// WithMeterProvider sets where the inbox's metrics go, instead of the
// global provider, otel.GetMeterProvider(), as it is when [New] is called.
func WithMeterProvider(mp metric.MeterProvider) Option {
	return func(c *config) error {
		if mp == nil {
			return fmt.Errorf("%w: WithMeterProvider(nil): leave the option out for the global provider", ErrInvalidConfig)
		}
		c.meterProvider = mp
		return nil
	}
}

package inbox

import (
	"fmt"
	"log/slog"
	"regexp"
	"strings"
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
// digit, and not a name the inbox cannot use (reservedTable): a word
// either dialect reserves (order, user, group, select, table...), a name
// ending in "_owed" (another inbox's runs owed), one the outbox uses
// (starting with keyorder_outbox), or one a database keeps for itself
// (starting with pg_ or sqlite_). Each is refused with
// [ErrInvalidConfig].
func WithTable(name string) Option {
	return func(c *config) error {
		if !tableRE.MatchString(name) {
			return fmt.Errorf("%w: WithTable(%q): want 1 to 47 of [a-z0-9_], not starting with a digit", ErrInvalidConfig, name)
		}
		if why := reservedTable(name); why != "" {
			return fmt.Errorf("%w: WithTable(%q): %s", ErrInvalidConfig, name, why)
		}
		c.table = name
		return nil
	}
}

// reservedTable says why name cannot be the inbox's table, or "".
func reservedTable(name string) string {
	switch {
	case reservedWords[name]:
		return "a word SQLite or PostgreSQL reserves, which the inbox's statements cannot name unquoted"
	case strings.HasSuffix(name, "_owed"):
		return `the name of an inbox's table of owed numbers (the suffix "_owed")`
	case strings.HasPrefix(name, "keyorder_outbox"):
		return "a name the outbox's tables use"
	case strings.HasPrefix(name, "pg_"), strings.HasPrefix(name, "sqlite_"):
		return "a prefix the database keeps for its own tables"
	}
	return ""
}

// reservedWords are the words that failed as the inbox's table name on
// SQLite (modernc.org/sqlite) or PostgreSQL 15, when every word of both
// lists of keywords was tried through New, a message and Prune: PostgreSQL's reserved words,
// SQLite's that it takes for no identifier, and "excluded", which names
// the row an upsert proposes and makes the lock statement ambiguous.
var reservedWords = func() map[string]bool {
	m := map[string]bool{}
	for _, w := range strings.Fields(`add all alter analyse analyze and any array as asc asymmetric
		authorization autoincrement between binary both case cast check
		collate collation column commit concurrently constraint create cross
		current_catalog current_date current_role current_schema current_time
		current_timestamp current_user default deferrable delete desc
		distinct do drop else end escape except excluded exists false fetch
		for foreign freeze from full grant group having if ilike in index
		initially inner insert intersect into is isnull join lateral leading
		left like limit localtime localtimestamp natural not nothing notnull
		null offset on only or order outer overlaps placing primary raise
		references returning right select session_user set similar some
		symmetric table tablesample then to trailing transaction true union
		unique update user using values variadic verbose when where window
		with`) {
		m[w] = true
	}
	return m
}()

// WithGapWait sets how long a message after a gap in its producer's
// numbers for its key waits for the missing ones before the inbox records
// them as owed and applies it. While it waits, its handler returns
// subscriber.RetryAfter (wrapping [ErrGapWait]), which holds only its key
// and costs no attempt (S5). The wait is measured from the first time any
// replica found the gap, as the store records it: every message waiting
// behind the gap, on every replica and door, shares that one clock, and
// it starts again only when the row moves on, a missing number come or
// owed. The default is
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

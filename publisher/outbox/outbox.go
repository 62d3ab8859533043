package outbox

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/base32"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/keyorder/keyorder/ordering"
	"github.com/keyorder/keyorder/publisher"
)

// An Outbox writes events in its callers' transactions, numbered per key
// in commit order, for a [Relay] to publish. It is safe for concurrent
// use, and holds no state of its own besides what [New] read: any number
// of Outboxes, in any number of processes, may share one database.
type Outbox struct {
	db       *sql.DB
	d        Dialect
	t        tables
	producer string // the stamps' producer ID, recorded in the database
	shards   int    // the shard count, recorded in the database

	number, insert string // Add's statements, spelled for d
	// Add's statements prepared on db (SQLite), or nil: see prepare.
	numberStmt, insertStmt *sql.Stmt
	wakers                 wakers // the relays of this Outbox running, which Add wakes
}

// An Option configures an [Outbox]. Options are checked once, in [New].
type Option func(*config) error

type config struct {
	shards int    // 0: defaultShards, or what the database recorded
	table  string // the tables' name
}

// DefaultTable is the name of an outbox's tables without [WithTable].
const DefaultTable = "keyorder_outbox"

var tableRE = regexp.MustCompile(`^[a-z_][a-z0-9_]{0,46}$`)

// WithTable names the outbox's tables: name holds the events, and
// name_keys, name_sent, name_meta, name_leases and name_relays the rest
// (see the package documentation, Tables). Give each service its own
// name when services share a database: an outbox is one service's, its
// relays publish to one topic, and [Relay.Run] refuses a relay of
// another. The default is [DefaultTable]; name must be 1 to 47 of
// [a-z0-9_], not starting with a digit.
func WithTable(name string) Option {
	return func(c *config) error {
		if !tableRE.MatchString(name) {
			return fmt.Errorf("%w: WithTable(%q): want 1 to 47 of [a-z0-9_], not starting with a digit", ErrInvalidConfig, name)
		}
		c.table = name
		return nil
	}
}

// defaultShards is the shard count of an outbox created without
// [WithShards].
const defaultShards = 32

// MaxShards is the most shards [WithShards] takes.
const MaxShards = 4096

// WithShards sets the number of shards the keys are hashed into
// ([ordering.Partition]), the unit that relays split among themselves: at
// most this many relays have work at once. It applies when New creates
// the outbox, which records it; a later New, in any process, takes the
// recorded count, and returns an error matching [ErrInvalidConfig] if
// this option names another. The default is 32; n must be 1 to
// [MaxShards].
func WithShards(n int) Option {
	return func(c *config) error {
		if n < 1 || n > MaxShards {
			return fmt.Errorf("%w: WithShards(%d): want 1 to %d", ErrInvalidConfig, n, MaxShards)
		}
		c.shards = n
		return nil
	}
}

// advisoryLock is the PostgreSQL advisory lock New holds while it creates
// the tables: concurrent CREATE TABLE IF NOT EXISTS of one table can fail
// on PostgreSQL's catalog, so the processes take turns.
const advisoryLock = 7_206_181_946_126_893

// New returns the outbox of db, creating its tables if they are missing,
// and, when it creates the outbox, its producer ID and shard count, which
// it records there: every relay and every restart then stamps as the same
// producer (S12) and hashes keys alike. Several processes may call New at
// once. The caller keeps ownership of db.
//
// New returns an error matching [ErrInvalidConfig] for a nil db, an
// unknown d or a bad option, and a [*DBError] if the database refuses.
func New(ctx context.Context, db *sql.DB, d Dialect, opts ...Option) (*Outbox, error) {
	if db == nil {
		return nil, fmt.Errorf("%w: nil *sql.DB", ErrInvalidConfig)
	}
	if !d.Valid() {
		return nil, fmt.Errorf("%w: unknown dialect %v", ErrInvalidConfig, d)
	}
	cfg := config{table: DefaultTable}
	for i, opt := range opts {
		if opt == nil {
			return nil, fmt.Errorf("%w: option %d is nil", ErrInvalidConfig, i)
		}
		if err := opt(&cfg); err != nil {
			return nil, err
		}
	}
	o := &Outbox{db: db, d: d, t: tablesOf(cfg.table)}
	if err := o.probe(ctx); err != nil {
		return nil, err
	}
	if err := o.create(ctx, cfg); err != nil {
		return nil, err
	}
	o.number = d.Rebind(`INSERT INTO ` + o.t.keys + ` (key, last) VALUES (?, 1)
		ON CONFLICT (key) DO UPDATE SET last = ` + o.t.keys + `.last + 1
		WHERE ` + o.t.keys + `.last < 4294967295 RETURNING last`)
	o.insert = d.Rebind(`INSERT INTO ` + o.t.events + ` (key, seq, shard, data, headers, created) VALUES (?, ?, ?, ?, ?, ?)`)
	if err := o.prepare(ctx); err != nil {
		return nil, err
	}
	return o, nil
}

// probe checks that the database answers, and as d.
func (o *Outbox) probe(ctx context.Context) error {
	if err := o.db.PingContext(ctx); err != nil {
		return &DBError{Op: "connect", Err: err}
	}
	if err := o.d.Check(ctx, o.db); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	return nil
}

// checkShape checks that the tables have the outbox's columns: a table of
// the same name made by another program is refused, not written into.
func (o *Outbox) checkShape(ctx context.Context, tx *sql.Tx, want map[string][]string) error {
	for table, cols := range want {
		rs, err := tx.QueryContext(ctx, o.d.ColumnsQuery(), table)
		if err != nil {
			return &DBError{Op: "read the tables' columns", Err: err}
		}
		var got []string
		for rs.Next() {
			var c string
			if err := rs.Scan(&c); err != nil {
				rs.Close()
				return &DBError{Op: "read the tables' columns", Err: err}
			}
			got = append(got, strings.ToLower(c))
		}
		rs.Close()
		if err := rs.Err(); err != nil {
			return &DBError{Op: "read the tables' columns", Err: err}
		}
		slices.Sort(got)
		if !slices.Equal(got, cols) {
			return fmt.Errorf("%w: table %s has the columns (%s), not an outbox's (%s): name the outbox's tables with WithTable",
				ErrInvalidConfig, table, strings.Join(got, ", "), strings.Join(cols, ", "))
		}
	}
	return nil
}

// create makes the tables and reads, or records, what every process
// shares, in one transaction.
func (o *Outbox) create(ctx context.Context, cfg config) error {
	tx, err := o.db.BeginTx(ctx, nil)
	if err != nil {
		return &DBError{Op: "begin", Err: err}
	}
	defer func() { _ = tx.Rollback() }()
	if o.d == PostgreSQL {
		if _, err := tx.ExecContext(ctx, `SELECT pg_advisory_xact_lock(`+strconv.Itoa(advisoryLock)+`)`); err != nil {
			return &DBError{Op: "lock the schema", Err: err}
		}
	}
	stmts, columns := schema(o.d, o.t)
	for _, stmt := range stmts {
		if _, err := tx.ExecContext(ctx, stmt); err != nil {
			return &DBError{Op: "create the tables", Err: err}
		}
	}
	if err := o.checkShape(ctx, tx, columns); err != nil {
		return err
	}
	if o.d == SQLite {
		// The relay's delete finds the rows it deletes by their rowid.
		if _, err := tx.ExecContext(ctx, `SELECT rowid FROM `+o.t.events+` LIMIT 0`); err != nil {
			return fmt.Errorf("%w: table %s has no rowid (WITHOUT ROWID), which an outbox's has: name the outbox's tables with WithTable",
				ErrInvalidConfig, o.t.events)
		}
	}
	if o.d == PostgreSQL {
		if err := o.createTrigger(ctx, tx); err != nil {
			return err
		}
	}
	shards := cfg.shards
	if shards == 0 {
		shards = defaultShards
	}
	if o.producer, err = o.shared(ctx, tx, "producer", newProducer()); err != nil {
		return err
	}
	recorded, err := o.shared(ctx, tx, "shards", strconv.Itoa(shards))
	if err != nil {
		return err
	}
	if o.shards, err = strconv.Atoi(recorded); err != nil || o.shards < 1 || o.shards > MaxShards {
		return fmt.Errorf("%w: the outbox's shard count is recorded as %q, not 1 to %d", ErrInvalidConfig, recorded, MaxShards)
	}
	if cfg.shards != 0 && cfg.shards != o.shards {
		return fmt.Errorf("%w: WithShards(%d), but the outbox was created with %d shards", ErrInvalidConfig, cfg.shards, o.shards)
	}
	if err := tx.Commit(); err != nil {
		return &DBError{Op: "commit the tables", Err: err}
	}
	return nil
}

// createTrigger makes the trigger that wakes relays at commit, unless it
// is there (PostgreSQL).
func (o *Outbox) createTrigger(ctx context.Context, tx *sql.Tx) error {
	function, trigger := notify(o.t)
	if _, err := tx.ExecContext(ctx, function); err != nil {
		return &DBError{Op: "create the notify function", Err: err}
	}
	var n int
	err := tx.QueryRowContext(ctx, `SELECT COUNT(*) FROM pg_trigger WHERE tgname = $1 AND tgrelid = $2::regclass`,
		o.t.events+"_notify", o.t.events).Scan(&n)
	if err != nil {
		return &DBError{Op: "look for the notify trigger", Err: err}
	}
	if n == 0 {
		if _, err := tx.ExecContext(ctx, trigger); err != nil {
			return &DBError{Op: "create the notify trigger", Err: err}
		}
	}
	return nil
}

// shared records value under name unless a value is recorded already, and
// returns the recorded one.
func (o *Outbox) shared(ctx context.Context, tx *sql.Tx, name, value string) (string, error) {
	ins := o.d.Rebind(`INSERT INTO ` + o.t.meta + ` (name, value) VALUES (?, ?) ON CONFLICT (name) DO NOTHING`)
	if _, err := tx.ExecContext(ctx, ins, name, value); err != nil {
		return "", &DBError{Op: "record the " + name, Err: err}
	}
	var got string
	sel := o.d.Rebind(`SELECT value FROM ` + o.t.meta + ` WHERE name = ?`)
	if err := tx.QueryRowContext(ctx, sel, name).Scan(&got); err != nil {
		return "", &DBError{Op: "read the " + name, Err: err}
	}
	return got, nil
}

var lowerBase32 = base32.NewEncoding("abcdefghijklmnopqrstuvwxyz234567").WithPadding(base32.NoPadding)

// newProducer returns a new outbox's producer ID: "outbox#" and 26 random
// characters, so that no other producer, an outbox or a Publisher, has it.
func newProducer() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // never fails
	return "outbox#" + lowerBase32.EncodeToString(b[:])
}

// Producer returns the producer ID that stamps the outbox's events
// ([ordering.Stamp]): the same in every process and across restarts.
func (o *Outbox) Producer() string { return o.producer }

// Shards returns the number of shards the keys are hashed into.
func (o *Outbox) Shards() int { return o.shards }

// Add writes msg as the next event of key, in tx, the caller's
// transaction, of any *sql.DB on the outbox's database: the event exists
// if and only if tx commits, and a relay publishes it with
// [publisher.WithOrderingKey](key) and the stamp
// {[Outbox.Producer], [ordering.MakeSeq](0, n)}, where n is its number.
//
// Numbers are given in commit order, 1, 2, 3... per key, with no gap: Add
// increments the key's counter row in tx, and the row's lock, held until
// tx ends, makes a concurrent writer of the key wait for tx to commit or
// roll back before it takes the next number (or this one, after a
// rollback). So a relay sees n committed before n+1 can exist, and cannot
// pass a number whose transaction commits later, as one reading by an
// auto-increment ID can. Writers of different keys do not wait for each
// other, except as the database serialises writers anyway (SQLite).
//
// Bad input is refused before any statement, with a typed error, and tx
// stays as it was: [ErrNilTx], [ErrNoKey], a [*publisher.ValidationError]
// matching [ErrKeyNUL] for a key with a NUL byte, which neither database
// stores, or the [*publisher.ValidationError] that
// [publisher.Publisher.Publish] would return for msg with key, a stamp and
// its signature ([WithStampKey], [ordering.SignatureSize]) (P6,
// [publisher.Check]): a key the service refuses, a stamp header, an
// attribute or a size over the limits. Add returns a [*DBError] if the
// database refuses a statement; the caller should then roll tx back.
// msg's [ordering.Header] header, if any, is ignored: key is the key.
func (o *Outbox) Add(ctx context.Context, tx *sql.Tx, key string, msg *publisher.Message) error {
	if tx == nil {
		return ErrNilTx
	}
	if key == "" {
		return ErrNoKey
	}
	if strings.IndexByte(key, 0) >= 0 {
		return &publisher.ValidationError{Key: truncate(key), Err: ErrKeyNUL, Detail: "neither database stores a NUL byte in text"}
	}
	if err := publisher.Check(msg, key); err != nil {
		return err
	}
	if err := publisher.Check(signed(msg), key); err != nil {
		return err
	}
	headers, err := encodeHeaders(msg.Headers)
	if err != nil {
		return err
	}
	n, prepared, err := o.next(ctx, tx, key)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return fmt.Errorf("%w: %q", ErrKeyExhausted, key)
	case err != nil:
		return &DBError{Op: "number the key", Err: err}
	}
	shard := ordering.Partition(key, o.shards)
	args := []any{key, n, shard, msg.Data, headers, time.Now().UnixNano()}
	if prepared {
		st := tx.StmtContext(ctx, o.insertStmt)
		_, err = st.ExecContext(ctx, args...)
		st.Close()
	} else {
		_, err = tx.ExecContext(ctx, o.insert, args...)
	}
	if err != nil {
		return &DBError{Op: "insert the event", Err: err}
	}
	o.wakers.wake()
	return nil
}

// prepare prepares Add's statements on o.db, on SQLite: modernc.org/sqlite
// parses a statement each time it is run from its text, and a transaction
// of one Add took 170 µs with its statements as text, 116 µs prepared
// (BenchmarkAdd, medians of 3 alternated runs). Not on PostgreSQL, where
// pgx's stdlib keeps a cache of prepared statements by their text, and
// statements of database/sql's made Add slower (567 to 606 µs).
func (o *Outbox) prepare(ctx context.Context) error {
	if o.d != SQLite {
		return nil
	}
	var err error
	if o.numberStmt, err = o.db.PrepareContext(ctx, o.number); err != nil {
		return &DBError{Op: "prepare Add's statements", Err: err}
	}
	if o.insertStmt, err = o.db.PrepareContext(ctx, o.insert); err != nil {
		o.numberStmt.Close()
		return &DBError{Op: "prepare Add's statements", Err: err}
	}
	// An Outbox has no Close: its statements close once it is
	// unreachable, so that an application that makes an Outbox per
	// request keeps none of them past it.
	runtime.AddCleanup(o, func(stmts [2]*sql.Stmt) {
		for _, s := range stmts {
			_ = s.Close()
		}
	}, [2]*sql.Stmt{o.numberStmt, o.insertStmt})
	return nil
}

// next takes key's next number in tx: with the prepared statement if
// there is one and tx is of o.db, and reports whether it did.
func (o *Outbox) next(ctx context.Context, tx *sql.Tx, key string) (n int64, prepared bool, err error) {
	if o.numberStmt != nil {
		st := tx.StmtContext(ctx, o.numberStmt)
		defer st.Close()
		err = st.QueryRowContext(ctx, key).Scan(&n)
		if err == nil || err.Error() != errOtherDB {
			return n, true, err
		}
		// tx is of another *sql.DB than o's: database/sql refused the
		// statement before it reached the database.
	}
	err = tx.QueryRowContext(ctx, o.number, key).Scan(&n)
	return n, false, err
}

// errOtherDB is database/sql's error for a statement prepared on one
// *sql.DB and run in a transaction of another (TestAddInATxOfAnotherDB).
const errOtherDB = "sql: Tx.Stmt: statement from different database used"

// signed returns msg with room for a relay's signature
// ([WithStampKey]): a placeholder of its size, in a copy of the headers,
// so that Check counts it. The placeholder's name is as long as the
// signature's, and is none of msg's headers: Check refuses the
// signature's own name, a stamp attribute, in a header.
func signed(msg *publisher.Message) *publisher.Message {
	if msg == nil {
		return nil
	}
	h := make(map[string]string, len(msg.Headers)+1)
	for k, v := range msg.Headers {
		h[k] = v
	}
	for i := 0; ; i++ {
		name := fmt.Sprintf("%0*d", len(ordering.SignatureAttribute), i)
		if _, taken := h[name]; !taken {
			h[name] = sigPlaceholder
			break
		}
	}
	return &publisher.Message{Data: msg.Data, Headers: h}
}

// sigPlaceholder is as long as a signature's text.
var sigPlaceholder = strings.Repeat("x", (ordering.SignatureBytes*8+5)/6)

// truncate cuts a key to 64 bytes for an error, as the publisher does.
func truncate(key string) string {
	if len(key) > 64 {
		return key[:64]
	}
	return key
}

// encodeHeaders writes headers, less the ordering key's header, as JSON;
// "" for none. Check has made sure every key and value is valid UTF-8,
// which JSON keeps as it is.
func encodeHeaders(h map[string]string) (string, error) {
	n := len(h)
	if _, ok := h[ordering.Header]; ok {
		n--
	}
	if n == 0 {
		return "", nil
	}
	if _, ok := h[ordering.Header]; ok {
		c := make(map[string]string, n)
		for k, v := range h {
			if k != ordering.Header {
				c[k] = v
			}
		}
		h = c
	}
	b, err := json.Marshal(h)
	if err != nil {
		return "", &DBError{Op: "encode the headers", Err: err}
	}
	return string(b), nil
}

// decodeHeaders reads what encodeHeaders wrote, with room for the stamp.
func decodeHeaders(s string) (map[string]string, error) {
	if s == "" {
		return make(map[string]string, ordering.StampAttributes), nil
	}
	h := map[string]string{}
	if err := json.Unmarshal([]byte(s), &h); err != nil {
		return nil, err
	}
	return h, nil
}

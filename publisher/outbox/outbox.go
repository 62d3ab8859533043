package outbox

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/base32"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
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
	producer string // the stamps' producer ID, recorded in the database
	shards   int    // the shard count, recorded in the database

	number, insert string // Add's statements, spelled for d
}

// An Option configures an [Outbox]. Options are checked once, in [New].
type Option func(*config) error

type config struct {
	shards int // 0: defaultShards, or what the database recorded
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
	if d != SQLite && d != PostgreSQL {
		return nil, fmt.Errorf("%w: unknown dialect %v", ErrInvalidConfig, d)
	}
	var cfg config
	for i, opt := range opts {
		if opt == nil {
			return nil, fmt.Errorf("%w: option %d is nil", ErrInvalidConfig, i)
		}
		if err := opt(&cfg); err != nil {
			return nil, err
		}
	}
	o := &Outbox{db: db, d: d}
	if err := o.create(ctx, cfg); err != nil {
		return nil, err
	}
	o.number = d.q(`INSERT INTO ` + tableKeys + ` (key, last) VALUES (?, 1)
		ON CONFLICT (key) DO UPDATE SET last = ` + tableKeys + `.last + 1
		WHERE ` + tableKeys + `.last < 4294967295 RETURNING last`)
	o.insert = d.q(`INSERT INTO ` + tableEvents + ` (key, seq, shard, data, headers, created) VALUES (?, ?, ?, ?, ?, ?)`)
	return o, nil
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
	for _, stmt := range o.d.schema() {
		if _, err := tx.ExecContext(ctx, stmt); err != nil {
			return &DBError{Op: "create the tables", Err: err}
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
	if o.shards, err = strconv.Atoi(recorded); err != nil || o.shards < 1 {
		return &DBError{Op: "read the shard count", Err: fmt.Errorf("recorded as %q", recorded)}
	}
	if cfg.shards != 0 && cfg.shards != o.shards {
		return fmt.Errorf("%w: WithShards(%d), but the outbox was created with %d shards", ErrInvalidConfig, cfg.shards, o.shards)
	}
	if err := tx.Commit(); err != nil {
		return &DBError{Op: "commit the tables", Err: err}
	}
	return nil
}

// shared records value under name unless a value is recorded already, and
// returns the recorded one.
func (o *Outbox) shared(ctx context.Context, tx *sql.Tx, name, value string) (string, error) {
	ins := o.d.q(`INSERT INTO ` + tableMeta + ` (name, value) VALUES (?, ?) ON CONFLICT (name) DO NOTHING`)
	if _, err := tx.ExecContext(ctx, ins, name, value); err != nil {
		return "", &DBError{Op: "record the " + name, Err: err}
	}
	var got string
	sel := o.d.q(`SELECT value FROM ` + tableMeta + ` WHERE name = ?`)
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
// transaction: the event exists if and only if tx commits, and a relay
// publishes it with [publisher.WithOrderingKey](key) and the stamp
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
// Bad input is refused before anything is written, with a typed error:
// [ErrNilTx], [ErrNoKey], or the [*publisher.ValidationError] that
// [publisher.Publisher.Publish] would return for msg with key and a stamp
// (P6, [publisher.Check]): a key the service refuses, a stamp header, an
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
	if err := publisher.Check(msg, key); err != nil {
		return err
	}
	headers, err := encodeHeaders(msg.Headers)
	if err != nil {
		return err
	}
	var n int64
	switch err := tx.QueryRowContext(ctx, o.number, key).Scan(&n); {
	case errors.Is(err, sql.ErrNoRows):
		return fmt.Errorf("%w: %q", ErrKeyExhausted, key)
	case err != nil:
		return &DBError{Op: "number the key", Err: err}
	}
	shard := ordering.Partition(key, o.shards)
	if _, err := tx.ExecContext(ctx, o.insert, key, n, shard, msg.Data, headers, time.Now().UnixNano()); err != nil {
		return &DBError{Op: "insert the event", Err: err}
	}
	return nil
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

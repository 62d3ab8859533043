package inbox_test

import (
	"context"
	"database/sql"
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/keyorder/keyorder/subscriber"
	"github.com/keyorder/keyorder/subscriber/inbox"
)

// The edges where the inbox meets a real database or a real mistake: each
// is refused with a typed error that names it, before it costs more than
// its own message.

// TestWithTableRefuses: a name the inbox's statements cannot use, or that
// another table of keyorder's has, is refused before anything is made.
func TestWithTableRefuses(t *testing.T) {
	eachDatabase(t, func(t *testing.T, db database) {
		ctx := timeout(t, 30e9)
		one, _ := db.open(t)
		for _, name := range []string{
			"order", "user", "group", "select", "table", "excluded", "where",
			"Orders", "a b", "x;drop", "1st", "",
			"keyorder_outbox", "keyorder_outbox_keys", "keyorder_outboxes",
			"keyorder_inbox_owed", "billing_owed", "pg_class", "sqlite_master",
		} {
			_, err := inbox.New(ctx, one, db.dialect, inbox.WithTable(name))
			assert.ErrorIs(t, err, inbox.ErrInvalidConfig, "WithTable(%q)", name)
		}
		assert.Zero(t, count(t, one, tables(db.dialect)), "nothing made")
		for _, name := range []string{"orders", "users", "billing_inbox", "owed_things"} {
			_, err := inbox.New(ctx, one, db.dialect, inbox.WithTable(name))
			assert.NoError(t, err, "WithTable(%q)", name)
		}
	})
}

// tables is a query that counts the tables in the database.
func tables(d inbox.Dialect) string {
	if d == inbox.PostgreSQL {
		return `SELECT COUNT(*) FROM information_schema.tables WHERE table_schema = current_schema()`
	}
	return `SELECT COUNT(*) FROM sqlite_master WHERE type = 'table'`
}

// TestNewRefusesForeignTable: a table of the inbox's name that is not the
// inbox's is refused with ErrTableShape, which names it, and is left as
// it was; one with an extra column the inbox need not fill is its own.
func TestNewRefusesForeignTable(t *testing.T) {
	eachDatabase(t, func(t *testing.T, db database) {
		ctx := timeout(t, 30e9)
		one, _ := db.open(t)
		for _, stmt := range []string{
			`CREATE TABLE events (id BIGINT PRIMARY KEY, key TEXT NOT NULL, data TEXT NOT NULL)`,
			`CREATE TABLE half (key TEXT NOT NULL, producer TEXT NOT NULL, last_seq BIGINT NOT NULL, PRIMARY KEY (key, producer))`,
			`CREATE TABLE lonely_owed (key TEXT NOT NULL, what TEXT NOT NULL)`,
			`CREATE TABLE strict (key TEXT NOT NULL, producer TEXT NOT NULL, last_seq BIGINT NOT NULL,
				prev_seq BIGINT NOT NULL DEFAULT 0, wait_seq BIGINT NOT NULL DEFAULT 0, wait_since BIGINT NOT NULL DEFAULT 0,
				touched BIGINT NOT NULL, tenant TEXT NOT NULL, PRIMARY KEY (key, producer))`,
			`CREATE TABLE roomy (key TEXT NOT NULL, producer TEXT NOT NULL, last_seq BIGINT NOT NULL,
				prev_seq BIGINT NOT NULL DEFAULT 0, wait_seq BIGINT NOT NULL DEFAULT 0, wait_since BIGINT NOT NULL DEFAULT 0,
				touched BIGINT NOT NULL, note TEXT, PRIMARY KEY (key, producer))`,
		} {
			_, err := one.ExecContext(ctx, stmt)
			require.NoError(t, err)
		}
		for _, name := range []string{"events", "half", "lonely", "strict"} {
			_, err := inbox.New(ctx, one, db.dialect, inbox.WithTable(name))
			require.ErrorIs(t, err, inbox.ErrTableShape, name)
			assert.Contains(t, err.Error(), name)
		}
		assert.Zero(t, count(t, one, `SELECT COUNT(*) FROM events`), "left as it was")
		ib := newInbox(t, one, db.dialect, inbox.WithTable("roomy"))
		require.NoError(t, ib.Handler(record(db.dialect))(ctx, delivery("k", "p", 1)))
	})
}

// TestUnstorable: a key or producer the table cannot hold (a NUL byte,
// which PostgreSQL's TEXT refuses; bytes that are not UTF-8) is refused
// for good, on both databases alike, rather than retried for ever; the
// other keys go on.
func TestUnstorable(t *testing.T) {
	eachDatabase(t, func(t *testing.T, db database) {
		ctx := timeout(t, 30e9)
		one, _ := db.open(t)
		ib := newInbox(t, one, db.dialect)
		h := ib.Handler(record(db.dialect))
		for _, d := range []*subscriber.Delivery{delivery("k\x00", "p", 1), delivery("k", "p\x00q", 1), delivery("k\xff", "p", 1)} {
			err := h(ctx, d)
			require.ErrorIs(t, err, inbox.ErrUnstorable, "%q/%q", d.Key, d.Producer)
			var perm *subscriber.PermanentError
			require.ErrorAs(t, err, &perm, "a retry would fail alike")
		}
		require.NoError(t, h(ctx, delivery("k", "p", 1)))
		times, _ := applied(t, one)
		assert.Equal(t, map[string]int{"k/0.1": 1}, times)
	})
}

// TestDialectMismatch: the wrong Dialect for the database is named in
// New's error, rather than found in a statement's syntax error.
func TestDialectMismatch(t *testing.T) {
	t.Parallel()
	ctx := timeout(t, 30e9)
	lite, _ := databases[0].open(t)
	pg, _ := databases[1].open(t)
	_, err := inbox.New(ctx, pg, inbox.SQLite)
	require.ErrorIs(t, err, inbox.ErrInvalidConfig)
	assert.Contains(t, err.Error(), "dialect SQLite, but the database is PostgreSQL")
	_, err = inbox.New(ctx, lite, inbox.PostgreSQL)
	require.ErrorIs(t, err, inbox.ErrInvalidConfig)
	assert.Contains(t, err.Error(), "dialect PostgreSQL, but the database is SQLite")
	assert.Zero(t, count(t, pg, tables(inbox.PostgreSQL)), "nothing made")
}

// TestHandlerNil: Handler(nil) panics at once, with ErrInvalidConfig,
// rather than giving a handler that panics on every message.
func TestHandlerNil(t *testing.T) {
	eachDatabase(t, func(t *testing.T, db database) {
		one, _ := db.open(t)
		ib := newInbox(t, one, db.dialect)
		defer func() {
			err, _ := recover().(error)
			assert.ErrorIs(t, err, inbox.ErrInvalidConfig)
		}()
		ib.Handler(nil)
		t.Fatal("Handler(nil) returned")
	})
}

// TestApplyEndsTransaction: an apply that commits or rolls back the
// inbox's transaction gets ErrTxEnded, for good, which names the rule;
// the key is not held: a correct apply then applies the message once.
func TestApplyEndsTransaction(t *testing.T) {
	eachDatabase(t, func(t *testing.T, db database) {
		ctx := timeout(t, 30e9)
		one, _ := db.open(t)
		ib := newInbox(t, one, db.dialect)
		good := ib.Handler(record(db.dialect))
		for name, end := range map[string]func(*sql.Tx) error{"commit": (*sql.Tx).Commit, "rollback": (*sql.Tx).Rollback} {
			key := "k-" + name
			bad := ib.Handler(func(ctx context.Context, tx *sql.Tx, d *subscriber.Delivery) error {
				if err := record(db.dialect)(ctx, tx, d); err != nil {
					return err
				}
				return end(tx)
			})
			for n := uint32(1); n <= 2; n++ {
				err := bad(ctx, delivery(key, "p", n))
				require.ErrorIs(t, err, inbox.ErrTxEnded, name)
				var perm *subscriber.PermanentError
				require.ErrorAs(t, err, &perm, name)
				require.NoError(t, good(ctx, delivery(key, "p", n)), "%s: the key goes on", name)
			}
		}
		times, order := applied(t, one)
		for k, n := range times {
			assert.Equal(t, 1, n, k)
		}
		assert.Equal(t, []uint64{1, 2}, order["k-commit"], "committed by apply, then a copy")
		assert.Equal(t, []uint64{1, 2}, order["k-rollback"], "rolled back by apply, then applied")
		// An error of apply's own that wraps sql.ErrTxDone is named too.
		err := ib.Handler(func(ctx context.Context, tx *sql.Tx, d *subscriber.Delivery) error {
			_ = tx.Rollback()
			_, err := tx.ExecContext(ctx, `SELECT 1`)
			return err
		})(ctx, delivery("k-rollback", "p", 3))
		require.ErrorIs(t, err, inbox.ErrTxEnded)
		require.True(t, errors.Is(err, sql.ErrTxDone))
	})
}

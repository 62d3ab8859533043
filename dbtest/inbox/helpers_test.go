package inbox_test

import (
	"context"
	"database/sql"
	"fmt"
	"log/slog"
	"os"
	"testing"
	"time"

	"cloud.google.com/go/pubsub/v2"
	"github.com/stretchr/testify/require"

	"github.com/keyorder/keyorder/dbtest/pgtest"
	"github.com/keyorder/keyorder/dbtest/sqlitetest"
	"github.com/keyorder/keyorder/ordering"
	"github.com/keyorder/keyorder/ordering/orderingtest"
	"github.com/keyorder/keyorder/subscriber"
	"github.com/keyorder/keyorder/subscriber/inbox"
)

func TestMain(m *testing.M) {
	// The tests name the servers they use. PUBSUB_EMULATOR_HOST would also
	// tell every Receive that its server redelivers out of order
	// (subscriber.WithUnorderedRedelivery), and change which copies the
	// process skips before the inbox sees them.
	_ = os.Unsetenv("PUBSUB_EMULATOR_HOST")
	pgtest.Main(m)
}

// A database is one of the two the inbox runs on; open gives a fresh one
// and a second handle on the same database, as another replica has.
type database struct {
	name    string
	dialect inbox.Dialect
	open    func(tb testing.TB) (db, other *sql.DB)
}

var databases = []database{
	{"SQLite", inbox.SQLite, func(tb testing.TB) (*sql.DB, *sql.DB) {
		dsn := sqlitetest.Fresh(tb) // turned to WAL before the two handles
		return openDSN(tb, sqlitetest.Driver, dsn), openDSN(tb, sqlitetest.Driver, dsn)
	}},
	{"PostgreSQL", inbox.PostgreSQL, func(tb testing.TB) (*sql.DB, *sql.DB) {
		dsn := pgtest.DSN(tb)
		return openDSN(tb, pgtest.Driver, dsn), openDSN(tb, pgtest.Driver, dsn)
	}},
}

// connect returns a client of srv in the tests' project, closed when the
// test ends.
func connect(t *testing.T, ctx context.Context, srv *orderingtest.Server) *pubsub.Client {
	t.Helper()
	client, err := srv.Client(ctx, "inbox-test")
	require.NoError(t, err)
	t.Cleanup(func() { _ = client.Close() })
	return client
}

func openDSN(tb testing.TB, driver, dsn string) *sql.DB {
	db, err := sql.Open(driver, dsn)
	require.NoError(tb, err)
	tb.Cleanup(func() { _ = db.Close() })
	return db
}

// eachDatabase runs f on each database, as a parallel subtest.
func eachDatabase(t *testing.T, f func(t *testing.T, db database)) {
	for _, d := range databases {
		t.Run(d.name, func(t *testing.T) {
			t.Parallel()
			f(t, d)
		})
	}
}

// effects is the test's own state: one row per application, with no
// unique constraint, so that a message applied twice shows as two rows.
// id grows with each insert; a key's inserts take turns on the inbox's
// lock, so its rows in id order are in the order they were applied.
func effects(d inbox.Dialect) string {
	id := "id INTEGER PRIMARY KEY"
	if d == inbox.PostgreSQL {
		id = "id BIGSERIAL PRIMARY KEY"
	}
	return `CREATE TABLE IF NOT EXISTS effects (
	` + id + `,
	key        TEXT   NOT NULL,
	producer   TEXT   NOT NULL,
	seq        BIGINT NOT NULL,
	message_id TEXT   NOT NULL
)`
}

// rebind spells q's placeholders for d.
func rebind(d inbox.Dialect, q string) string {
	if d != inbox.PostgreSQL {
		return q
	}
	out, n := []byte{}, 0
	for i := 0; i < len(q); i++ {
		if q[i] == '?' {
			n++
			out = fmt.Appendf(out, "$%d", n)
			continue
		}
		out = append(out, q[i])
	}
	return string(out)
}

// record is an ApplyFunc that writes d to effects.
func record(dialect inbox.Dialect) inbox.ApplyFunc {
	q := rebind(dialect, `INSERT INTO effects (key, producer, seq, message_id) VALUES (?, ?, ?, ?)`)
	return func(ctx context.Context, tx *sql.Tx, d *subscriber.Delivery) error {
		_, err := tx.ExecContext(ctx, q, d.Key, d.Producer, int64(d.Seq), d.ID)
		return err
	}
}

// newInbox makes the effects table and an Inbox on db.
func newInbox(t testing.TB, db *sql.DB, d inbox.Dialect, opts ...inbox.Option) *inbox.Inbox {
	t.Helper()
	ctx := context.Background()
	_, err := db.ExecContext(ctx, effects(d))
	require.NoError(t, err)
	ib, err := inbox.New(ctx, db, d, append([]inbox.Option{inbox.WithLogger(slog.New(slog.DiscardHandler))}, opts...)...)
	require.NoError(t, err)
	return ib
}

// applied returns how many times each "key/seq" is in effects, and the
// key's numbers in the order they were applied.
func applied(t testing.TB, db *sql.DB) (times map[string]int, order map[string][]uint64) {
	t.Helper()
	rows, err := db.Query(`SELECT key, seq FROM effects ORDER BY id`)
	require.NoError(t, err)
	defer rows.Close()
	times, order = map[string]int{}, map[string][]uint64{}
	for rows.Next() {
		var key string
		var seq int64
		require.NoError(t, rows.Scan(&key, &seq))
		times[fmt.Sprintf("%s/%s", key, ordering.FormatSeq(uint64(seq)))]++
		order[key] = append(order[key], uint64(seq))
	}
	require.NoError(t, rows.Err())
	return times, order
}

// delivery is a stamped delivery of key, number n of epoch 0.
func delivery(key, producer string, n uint32) *subscriber.Delivery {
	seq := ordering.MakeSeq(0, n)
	return &subscriber.Delivery{ID: fmt.Sprintf("%s-%s-%d", key, producer, n), Key: key, Producer: producer, Seq: seq, Attempt: 1}
}

func timeout(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

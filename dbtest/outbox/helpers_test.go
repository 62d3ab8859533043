package outbox_test

import (
	"context"
	"database/sql"
	"fmt"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"cloud.google.com/go/pubsub/v2"
	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"github.com/stretchr/testify/require"

	"github.com/keyorder/keyorder/dbtest/pgtest"
	"github.com/keyorder/keyorder/dbtest/sqlitetest"
	"github.com/keyorder/keyorder/internal/harness"
	"github.com/keyorder/keyorder/ordering"
	"github.com/keyorder/keyorder/ordering/orderingtest"
	"github.com/keyorder/keyorder/publisher"
	"github.com/keyorder/keyorder/publisher/outbox"
)

// testTimeout bounds every wait of a test.
const testTimeout = 90 * time.Second

// A dbKind is a database the tests run on, and how to open one.
type dbKind struct {
	name    string
	dialect outbox.Dialect
	open    func(testing.TB) *sql.DB // a fresh database, closed when the test ends
	dsn     func(testing.TB) string  // a fresh database's DSN, for another process
	driver  string
}

var kinds = []dbKind{
	{name: "SQLite", dialect: outbox.SQLite, open: sqlitetest.Open, driver: sqlitetest.Driver,
		dsn: sqlitetest.Fresh},
	{name: "PostgreSQL", dialect: outbox.PostgreSQL, open: pgtest.Open, dsn: pgtest.DSN, driver: pgtest.Driver},
}

// eachDB runs f as a subtest on each kind of database.
func eachDB(t *testing.T, f func(t *testing.T, k dbKind)) {
	for _, k := range kinds {
		t.Run(k.name, func(t *testing.T) { f(t, k) })
	}
}

// openDB opens another *sql.DB on dsn, closed when the test ends.
func (k dbKind) openDSN(t testing.TB, dsn string) *sql.DB {
	t.Helper()
	db, err := sql.Open(k.driver, dsn)
	require.NoError(t, err)
	t.Cleanup(func() { _ = db.Close() })
	return db
}

// env is a fake server, a client and a topic for one test.
type env struct {
	srv    *orderingtest.Server
	client *pubsub.Client
	topic  string // its full name
}

var topicSeq atomic.Int64

func newEnv(t testing.TB, opts ...orderingtest.Option) *env {
	t.Helper()
	srv, client := harness.Fake(t, opts...)
	e := &env{srv: srv, client: client, topic: fmt.Sprintf("projects/%s/topics/events-%d", client.Project(), topicSeq.Add(1))}
	_, err := client.TopicAdminClient.CreateTopic(harness.Context(t, testTimeout), &pubsubpb.Topic{Name: e.topic})
	require.NoError(t, err)
	return e
}

// publisher returns a publisher without stamps on the env's topic, closed
// when the test ends.
func (e *env) publisher(t testing.TB, opts ...publisher.Option) *publisher.Publisher {
	t.Helper()
	opts = append([]publisher.Option{publisher.WithoutStamps(), publisher.WithLogger(quiet)}, opts...)
	p, err := publisher.New(e.client, e.topic, opts...)
	require.NoError(t, err)
	t.Cleanup(func() { _ = p.Close(context.Background()) })
	return p
}

var quiet = slog.New(slog.DiscardHandler)

// newOutbox makes, or opens, the outbox on db, failing t if it cannot.
func newOutbox(t testing.TB, ctx context.Context, db *sql.DB, k dbKind) *outbox.Outbox {
	t.Helper()
	ob, err := outbox.New(ctx, db, k.dialect)
	require.NoError(t, err)
	return ob
}

// setUp returns what most tests begin with: a context bounded by
// testTimeout, a fresh database of k, a fake server, and an outbox on the
// database.
func setUp(t *testing.T, k dbKind) (context.Context, *sql.DB, *env, *outbox.Outbox) {
	t.Helper()
	ctx := harness.Context(t, testTimeout)
	db, e := k.open(t), newEnv(t)
	return ctx, db, e, newOutbox(t, ctx, db, k)
}

// numbered returns prefix1 to prefixN.
func numbered(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s%d", prefix, i+1)
	}
	return out
}

// add commits one transaction that adds msgs to key.
func add(t testing.TB, ctx context.Context, db *sql.DB, ob *outbox.Outbox, key string, data ...string) {
	t.Helper()
	tx, err := db.BeginTx(ctx, nil)
	require.NoError(t, err)
	for _, d := range data {
		require.NoError(t, ob.Add(ctx, tx, key, &publisher.Message{Data: []byte(d)}))
	}
	require.NoError(t, tx.Commit())
}

// A topicView is what the topic holds of an outbox's events, per key.
type topicView struct {
	// firsts is, per key, the data of each number's first copy, in the
	// order the topic holds them.
	firsts map[string][]string
	copies int // later copies of a number
	// disorder lists the keys whose first copies did not come 1, 2, 3...
	disorder []string
}

// view reads the topic and checks each key's stamps: the first copy of
// each number must come in number order, from 1, with nothing skipped.
func (e *env) view(t testing.TB, producer string) topicView {
	t.Helper()
	v := topicView{firsts: map[string][]string{}}
	last := map[string]uint32{}
	bad := map[string]bool{}
	for _, m := range e.srv.Messages(e.topic) {
		st, err := ordering.ParseStamp(m.Attributes)
		require.NoError(t, err)
		require.Equal(t, producer, st.Producer, "stamped as the outbox's producer")
		epoch, n := ordering.SplitSeq(st.Seq)
		require.Zero(t, epoch)
		switch k := m.OrderingKey; {
		case n <= last[k]:
			v.copies++
		case n == last[k]+1:
			last[k] = n
			v.firsts[k] = append(v.firsts[k], string(m.Data))
		default:
			if !bad[k] {
				v.disorder = append(v.disorder, fmt.Sprintf("%s: %d after %d", k, n, last[k]))
			}
			bad[k] = true
		}
	}
	return v
}

// pending counts the events left in the outbox.
func pending(t testing.TB, db *sql.DB) int {
	t.Helper()
	n, err := countPending(db)
	require.NoError(t, err)
	return n
}

// countPending counts the events left in the outbox.
func countPending(db *sql.DB) (int, error) {
	var n int
	err := db.QueryRow(`SELECT COUNT(*) FROM keyorder_outbox`).Scan(&n)
	return n, err
}

// startRelay runs a relay of ob, quiet, publishing through a publisher
// of e's, until the test ends.
func startRelay(t testing.TB, ob *outbox.Outbox, e *env) *outbox.Relay {
	t.Helper()
	r, err := outbox.NewRelay(ob, e.publisher(t), outbox.WithLogger(quiet))
	require.NoError(t, err)
	runRelay(t, r)
	return r
}

// runRelay runs r until the test ends or the returned stop is called, and
// returns stop, which waits for Run to return.
func runRelay(t testing.TB, r *outbox.Relay) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	var stopped atomic.Bool
	stop = func() {
		if stopped.Swap(true) {
			return
		}
		cancel()
		select {
		case err := <-done:
			require.NoError(t, err)
		case <-time.After(testTimeout):
			t.Error("Run did not return")
		}
	}
	t.Cleanup(stop)
	return stop
}

// waitFor waits until cond holds, checking every 20 ms (the database
// changes without the server's knowledge), for testTimeout at most.
func waitFor(t testing.TB, e *env, what string, cond func() bool) {
	t.Helper()
	waitWithin(t, testTimeout, cond, func() string { return "timed out waiting for " + what })
}

// waitWithin waits up to d until cond holds, checking every 20 ms, and
// fails the test with failure's message if it does not.
func waitWithin(t testing.TB, d time.Duration, cond func() bool, failure func() string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		select {
		case <-ctx.Done():
			t.Fatal(failure())
		case <-tick.C:
		}
	}
}

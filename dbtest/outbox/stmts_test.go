package outbox_test

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"fmt"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/keyorder/keyorder/dbtest/sqlitetest"
	"github.com/keyorder/keyorder/internal/harness"
	"github.com/keyorder/keyorder/publisher/outbox"
)

// TestDroppedOutboxClosesItsStatements makes an Outbox on SQLite, adds an
// event, and drops it: the statements Add prepared on its handle must be
// closed once it is unreachable (it has no Close), so that an
// application that makes an Outbox per request keeps none of them.
func TestDroppedOutboxClosesItsStatements(t *testing.T) {
	t.Parallel()
	ctx := harness.Context(t, testTimeout)
	var open atomic.Int64
	db := openWrapped(t, sqliteDriver(t), sqlitetest.Fresh(t), func(c wholeConn) driver.Conn { return countingConn{c, &open} })

	func() {
		ob, err := outbox.New(ctx, db, outbox.SQLite)
		require.NoError(t, err)
		add(t, ctx, db, ob, "a", "a1")
	}()
	require.GreaterOrEqual(t, open.Load(), int64(2), "Add's statements, prepared on the handle's connection")
	require.Eventually(t, func() bool {
		runtime.GC()
		return open.Load() == 0
	}, 10*time.Second, 10*time.Millisecond, "Add's statements still open once the Outbox is unreachable")
}

// sqliteDriver returns the SQLite driver the tests use.
func sqliteDriver(t testing.TB) driver.Driver {
	t.Helper()
	base, err := sql.Open(sqlitetest.Driver, "")
	require.NoError(t, err)
	defer base.Close()
	return base.Driver()
}

// countingConn is a connection with nothing but Prepare and Begin, so
// that database/sql prepares every statement it runs.
type countingConn struct {
	driver.Conn
	open *atomic.Int64
}

func (c countingConn) Prepare(q string) (driver.Stmt, error) {
	s, err := c.Conn.Prepare(q)
	if err != nil {
		return nil, err
	}
	c.open.Add(1)
	return &countedStmt{Stmt: s, open: c.open}, nil
}

type countedStmt struct {
	driver.Stmt
	open   *atomic.Int64
	closed atomic.Bool
}

func (s *countedStmt) Close() error {
	if !s.closed.Swap(true) {
		s.open.Add(-1)
	}
	return s.Stmt.Close()
}

// TestRelayReadsPagesPrepared runs a relay on SQLite that polls every
// 2 ms, through a driver that counts the page statements the relay runs
// from their text, those it prepares, and the runs of the prepared ones:
// once the relay has read 50 pages, every read must have run prepared,
// and each page's text been prepared a few times at most (once per text
// and connection), not once per read. modernc.org/sqlite parses a text
// at every run. The events must be published all the same, and the
// statements closed once Run returns.
func TestRelayReadsPagesPrepared(t *testing.T) {
	t.Parallel()
	ctx := harness.Context(t, testTimeout)
	var n pageCounts
	db := openWrapped(t, sqliteDriver(t), sqlitetest.Fresh(t), func(c wholeConn) driver.Conn { return pageConn{c, &n} })
	ob, err := outbox.New(ctx, db, outbox.SQLite)
	require.NoError(t, err)
	e := newEnv(t)
	r, err := outbox.NewRelay(ob, e.publisher(t), outbox.WithLogger(quiet), outbox.WithPollInterval(2*time.Millisecond))
	require.NoError(t, err)
	add(t, ctx, db, ob, "a", "a1", "a2")
	stop := runRelay(t, r)
	add(t, ctx, db, ob, "b", "b1")

	waitWithin(t, testTimeout, func() bool { return n.text.Load()+n.runs.Load() >= 50 && pending(t, db) == 0 },
		func() string {
			return fmt.Sprintf("%d reads from text and %d prepared, %d events pending", n.text.Load(), n.runs.Load(), pending(t, db))
		})
	require.Zero(t, n.text.Load(), "page statements run from their text, parsed at each read")
	require.LessOrEqual(t, n.prepared.Load(), int64(8), "page statements prepared, over %d reads", n.runs.Load())
	v := e.view(t, ob.Producer())
	require.Equal(t, map[string][]string{"a": {"a1", "a2"}, "b": {"b1"}}, v.firsts)
	stop()
	require.Zero(t, n.open.Load(), "page statements left open once Run returned")
}

// pageCounts counts what a relay does with its page statements, those
// that select from the events table in key order.
type pageCounts struct {
	text, prepared, runs, open atomic.Int64
}

func isPage(q string) bool { return strings.HasPrefix(q, pageRead) }

// pageConn passes everything on to the driver's connection, and counts
// the page statements run from their text and those prepared.
type pageConn struct {
	wholeConn
	n *pageCounts
}

func (c pageConn) QueryContext(ctx context.Context, q string, args []driver.NamedValue) (driver.Rows, error) {
	if isPage(q) {
		c.n.text.Add(1)
	}
	return c.wholeConn.QueryContext(ctx, q, args)
}

func (c pageConn) PrepareContext(ctx context.Context, q string) (driver.Stmt, error) {
	s, err := c.wholeConn.Prepare(q)
	if err != nil || !isPage(q) {
		return s, err
	}
	c.n.prepared.Add(1)
	c.n.open.Add(1)
	return &pageStmt{wholeStmt: s.(wholeStmt), n: c.n}, nil
}

// pageStmt is a page statement prepared: it counts its runs, and its
// close.
type pageStmt struct {
	wholeStmt
	n      *pageCounts
	closed atomic.Bool
}

func (s *pageStmt) QueryContext(ctx context.Context, args []driver.NamedValue) (driver.Rows, error) {
	s.n.runs.Add(1)
	return s.wholeStmt.QueryContext(ctx, args)
}

func (s *pageStmt) Close() error {
	if !s.closed.Swap(true) {
		s.n.open.Add(-1)
	}
	return s.wholeStmt.Close()
}

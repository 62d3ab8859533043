package outbox_test

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"runtime"
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
	base, err := sql.Open(sqlitetest.Driver, "")
	require.NoError(t, err)
	d := base.Driver()
	require.NoError(t, base.Close())
	db := sql.OpenDB(countingConnector{d: d, dsn: sqlitetest.Fresh(t), open: &open})
	t.Cleanup(func() { db.Close() })

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

// countingConnector opens d's connections on dsn, and counts the
// statements prepared on them and not yet closed.
type countingConnector struct {
	d    driver.Driver
	dsn  string
	open *atomic.Int64
}

func (c countingConnector) Connect(context.Context) (driver.Conn, error) {
	conn, err := c.d.Open(c.dsn)
	if err != nil {
		return nil, err
	}
	return countingConn{conn, c.open}, nil
}

func (c countingConnector) Driver() driver.Driver { return c.d }

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

package outbox_test

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"testing"
)

// pageRead is how a relay's read of a page of events begins.
const pageRead = "SELECT e.key, e.seq, e.shard, e.data, e.headers, e.sent"

// hooks see the statements run on a database opened by openHooked,
// from their text or prepared.
type hooks struct {
	query func(q string) error // before each query, if set: its error fails it
	exec  func(q string) error // before each statement that returns no rows, if set: its error fails it
	row   func(q string)       // for each row a query returns, if set
}

// openHooked opens dsn with k's driver, on connections that call h.
func openHooked(t testing.TB, k dbKind, dsn string, h hooks) *sql.DB {
	t.Helper()
	return openWrapped(t, k.openDSN(t, dsn).Driver(), dsn, func(c wholeConn) driver.Conn { return hookedConn{c, h} })
}

// openWrapped opens dsn with drv, each connection as wrap makes it of
// the driver's own.
func openWrapped(t testing.TB, drv driver.Driver, dsn string, wrap func(wholeConn) driver.Conn) *sql.DB {
	t.Helper()
	db := sql.OpenDB(wrappedConnector{dsn: dsn, drv: drv, wrap: wrap})
	t.Cleanup(func() { _ = db.Close() })
	return db
}

type wrappedConnector struct {
	dsn  string
	drv  driver.Driver
	wrap func(wholeConn) driver.Conn
}

func (c wrappedConnector) Connect(context.Context) (driver.Conn, error) {
	conn, err := c.drv.Open(c.dsn)
	if err != nil {
		return nil, err
	}
	return c.wrap(conn.(wholeConn)), nil
}

func (c wrappedConnector) Driver() driver.Driver { return c.drv }

// wholeConn is what database/sql uses of a driver's connection.
type wholeConn interface {
	driver.Conn
	driver.ConnBeginTx
	driver.ExecerContext
	driver.QueryerContext
	driver.Pinger
}

type hookedConn struct {
	wholeConn
	h hooks
}

func (c hookedConn) QueryContext(ctx context.Context, q string, args []driver.NamedValue) (driver.Rows, error) {
	return c.h.queried(q, func() (driver.Rows, error) { return c.wholeConn.QueryContext(ctx, q, args) })
}

// queried runs the query q with run, and calls h's hooks around it.
func (h hooks) queried(q string, run func() (driver.Rows, error)) (driver.Rows, error) {
	if h.query != nil {
		if err := h.query(q); err != nil {
			return nil, err
		}
	}
	rs, err := run()
	if err != nil || h.row == nil {
		return rs, err
	}
	return hookedRows{rs, func() { h.row(q) }}, nil
}

// executed runs the statement q with run, after h's hook.
func (h hooks) executed(q string, run func() (driver.Result, error)) (driver.Result, error) {
	if h.exec != nil {
		if err := h.exec(q); err != nil {
			return nil, err
		}
	}
	return run()
}

// PrepareContext prepares q on the driver's connection: the hooks see
// each run of the statement as they see q run from its text.
func (c hookedConn) PrepareContext(ctx context.Context, q string) (driver.Stmt, error) {
	s, err := c.wholeConn.Prepare(q)
	if err != nil {
		return nil, err
	}
	return hookedStmt{s.(wholeStmt), q, c.h}, nil
}

// wholeStmt is what database/sql uses of a driver's statement.
type wholeStmt interface {
	driver.Stmt
	driver.StmtQueryContext
	driver.StmtExecContext
}

type hookedStmt struct {
	wholeStmt
	q string
	h hooks
}

func (s hookedStmt) QueryContext(ctx context.Context, args []driver.NamedValue) (driver.Rows, error) {
	return s.h.queried(s.q, func() (driver.Rows, error) { return s.wholeStmt.QueryContext(ctx, args) })
}

func (s hookedStmt) ExecContext(ctx context.Context, args []driver.NamedValue) (driver.Result, error) {
	return s.h.executed(s.q, func() (driver.Result, error) { return s.wholeStmt.ExecContext(ctx, args) })
}

// hookedRows calls row for each row it gives.
type hookedRows struct {
	driver.Rows
	row func()
}

func (r hookedRows) Next(dest []driver.Value) error {
	err := r.Rows.Next(dest)
	if err == nil {
		r.row()
	}
	return err
}

func (c hookedConn) ExecContext(ctx context.Context, q string, args []driver.NamedValue) (driver.Result, error) {
	return c.h.executed(q, func() (driver.Result, error) { return c.wholeConn.ExecContext(ctx, q, args) })
}

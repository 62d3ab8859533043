package sqldb

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
)

// A Dialect names the SQL database the outbox or the inbox runs on; both
// packages name this type (outbox.Dialect and inbox.Dialect are aliases
// of it), so that one value serves both.
type Dialect int

const (
	// SQLite is SQLite 3.35 or later.
	SQLite Dialect = iota + 1
	// PostgreSQL is PostgreSQL 13 or later.
	PostgreSQL
)

func (d Dialect) String() string {
	switch d {
	case SQLite:
		return "SQLite"
	case PostgreSQL:
		return "PostgreSQL"
	}
	return fmt.Sprintf("Dialect(%d)", int(d))
}

// Valid reports whether d is one of the dialects.
func (d Dialect) Valid() bool { return d == SQLite || d == PostgreSQL }

// Rebind spells query, written with "?" placeholders, for d.
func (d Dialect) Rebind(query string) string { return Rebind(d == PostgreSQL, query) }

// ColumnsQuery returns the names of a table's columns, in any order; its
// one argument is the table's name.
func (d Dialect) ColumnsQuery() string {
	if d == PostgreSQL {
		return `SELECT column_name FROM information_schema.columns WHERE table_schema = current_schema() AND table_name = $1`
	}
	return `SELECT name FROM pragma_table_info(?)`
}

// probe is a statement that only d's database answers.
func (d Dialect) probe() string {
	if d == PostgreSQL {
		return `SELECT current_setting('server_version')`
	}
	return `SELECT sqlite_version()`
}

// ErrMismatch is returned by [Dialect.Check] for a database that answers
// as the other dialect.
var ErrMismatch = errors.New("the database is of another dialect")

// Check asks db the question only d's database answers, so that the wrong
// Dialect is named rather than found later in a statement's syntax error.
// When the other dialect's question is answered, its error matches
// [ErrMismatch] and names both; when neither is, the database's own error
// is returned, wrapped.
func (d Dialect) Check(ctx context.Context, db *sql.DB) error {
	var version string
	err := db.QueryRowContext(ctx, d.probe()).Scan(&version)
	if err == nil {
		return nil
	}
	other := SQLite
	if d == SQLite {
		other = PostgreSQL
	}
	if db.QueryRowContext(ctx, other.probe()).Scan(&version) == nil {
		return fmt.Errorf("%w: dialect %v, but the database is %v %s (%s: %v)", ErrMismatch, d, other, version, d.probe(), err)
	}
	return fmt.Errorf("%s, asked of a database named %v: %w", d.probe(), d, err)
}

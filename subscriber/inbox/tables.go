package inbox

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/keyorder/keyorder/internal/sqldb"
	"github.com/keyorder/keyorder/subscriber"
)

// createTables makes the tables if they are missing, checks that the
// tables of those names are the inbox's (shape), and returns when the
// table was made, which the made row records (qMade). On PostgreSQL,
// CREATE TABLE IF NOT EXISTS is not safe against itself (two at once may
// both try, and one fail on the catalog's unique index), so replicas that
// start together take turns on an advisory lock; SQLite's writers take
// turns anyway.
func createTables(ctx context.Context, db *sql.DB, d Dialect, table string) (made time.Time, err error) {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return made, err
	}
	defer func() {
		if err != nil {
			err = errors.Join(err, tx.Rollback())
		}
	}()
	if d == PostgreSQL {
		if _, err := tx.ExecContext(ctx, `SELECT pg_advisory_xact_lock(hashtext($1))`, "keyorder/inbox "+table); err != nil {
			return made, err
		}
	}
	for _, stmt := range strings.Split(strings.ReplaceAll(schema, "{t}", table), ";") {
		if _, err := tx.ExecContext(ctx, stmt); err != nil {
			return made, fmt.Errorf("keyorder/inbox: create %s: %w", table, err)
		}
	}
	for name, want := range map[string][]string{table: mainColumns, table + "_owed": owedColumns} {
		if err := shape(ctx, tx, d, name, want); err != nil {
			return made, err
		}
	}
	q := func(s string) string { return sqldb.Rebind(d == PostgreSQL, strings.ReplaceAll(s, "{t}", table)) }
	now := time.Now()
	if _, err := tx.ExecContext(ctx, q(qMade), now.Unix(), now.UnixMilli()); err != nil {
		return made, err
	}
	var ms int64
	if err := tx.QueryRowContext(ctx, q(qMadeGet)).Scan(&ms); err != nil {
		return made, err
	}
	return time.UnixMilli(ms), tx.Commit()
}

// The columns of the inbox's tables, as schema makes them.
var (
	mainColumns = []string{"key", "producer", "last_seq", "prev_seq", "wait_seq", "wait_since", "touched"}
	owedColumns = []string{"key", "producer", "lo", "hi"}
)

// The queries that list a table's columns: name, whether it must be
// given (NOT NULL and no default).
const (
	qColumnsSQLite = `SELECT name, "notnull" <> 0 AND dflt_value IS NULL FROM pragma_table_info(?)`
	qColumnsPG     = `SELECT column_name, is_nullable = 'NO' AND column_default IS NULL
		FROM information_schema.columns WHERE table_schema = current_schema() AND table_name = $1`
)

// shape refuses a table of the inbox's name that CREATE TABLE IF NOT
// EXISTS left as it found it and that is not the inbox's: one without a
// column the inbox writes, or with one the inbox would not give.
func shape(ctx context.Context, tx *sql.Tx, d Dialect, name string, want []string) error {
	q := qColumnsSQLite
	if d == PostgreSQL {
		q = qColumnsPG
	}
	rows, err := tx.QueryContext(ctx, q, name)
	if err != nil {
		return err
	}
	defer rows.Close()
	var have, alien []string
	for rows.Next() {
		var col string
		var required bool
		if err := rows.Scan(&col, &required); err != nil {
			return err
		}
		have = append(have, col)
		if required && !slices.Contains(want, col) {
			alien = append(alien, col)
		}
	}
	if err := rows.Err(); err != nil {
		return err
	}
	var missing []string
	for _, col := range want {
		if !slices.Contains(have, col) {
			missing = append(missing, col)
		}
	}
	if len(missing) > 0 || len(alien) > 0 {
		return fmt.Errorf("%w: table %s has columns %v: missing %v, and %v required that the inbox does not write; name another table with WithTable",
			ErrTableShape, name, have, missing, alien)
	}
	return nil
}

// checkDialect names the wrong Dialect rather than leaving it to be
// found in a statement's syntax error.
func checkDialect(ctx context.Context, db *sql.DB, d Dialect) error {
	err := d.Check(ctx, db)
	if errors.Is(err, sqldb.ErrMismatch) {
		return fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	if err != nil {
		return fmt.Errorf("keyorder/inbox: %w", err)
	}
	return nil
}

// storable refuses a key or producer the table cannot hold: TEXT in
// PostgreSQL holds no NUL byte and only valid UTF-8, and SQLite's
// functions stop at a NUL; refused on both, so that a message fares the
// same on either. Permanent, since a retry would fail alike, for ever.
func storable(d *subscriber.Delivery) error {
	for _, s := range [...]string{d.Key, d.Producer} {
		if strings.IndexByte(s, 0) >= 0 || !utf8.ValidString(s) {
			return subscriber.Permanent(fmt.Errorf("%w: message %s, key %q, producer %q", ErrUnstorable, d.ID, d.Key, d.Producer))
		}
	}
	return nil
}

package outbox

import (
	"fmt"

	"github.com/keyorder/keyorder/internal/sqldb"
)

// A Dialect names the SQL database an [Outbox] runs on. The outbox speaks
// only database/sql: the caller opens the *sql.DB with the driver of its
// choice (modernc.org/sqlite, pgx's stdlib) and names its dialect.
type Dialect int

const (
	// SQLite is SQLite 3.35 or later. Open it in WAL mode with a busy
	// timeout, so that writers of several connections wait their turn;
	// the outbox's writes take SQLite's one write lock like any other.
	SQLite Dialect = iota + 1
	// PostgreSQL is PostgreSQL 13 or later, at any isolation level from
	// READ COMMITTED (its default) up.
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

// The outbox's tables. events holds the pending events, a row each until
// a relay has published it; keys the last number given to each key, the
// counter row that numbers a key's events in commit order; meta what every
// process must share (the producer ID, the shard count); leases which
// relay publishes which shard, and relays the relays alive.
const (
	tableEvents = "keyorder_outbox"
	tableKeys   = "keyorder_outbox_keys"
	tableMeta   = "keyorder_outbox_meta"
	tableLeases = "keyorder_outbox_leases"
	tableRelays = "keyorder_outbox_relays"
)

// schema returns the statements that create the tables if missing.
// Numbers are BIGINT, which both take; data is the one column whose type
// differs.
func (d Dialect) schema() []string {
	blob := "BLOB"
	if d == PostgreSQL {
		blob = "BYTEA"
	}
	return []string{
		`CREATE TABLE IF NOT EXISTS ` + tableMeta + ` (name TEXT PRIMARY KEY, value TEXT NOT NULL)`,
		`CREATE TABLE IF NOT EXISTS ` + tableKeys + ` (key TEXT PRIMARY KEY, last BIGINT NOT NULL)`,
		`CREATE TABLE IF NOT EXISTS ` + tableEvents + ` (key TEXT NOT NULL, seq BIGINT NOT NULL,
			shard INTEGER NOT NULL, data ` + blob + `, headers TEXT NOT NULL, created BIGINT NOT NULL,
			sent INTEGER NOT NULL DEFAULT 0, PRIMARY KEY (key, seq))`,
		`CREATE TABLE IF NOT EXISTS ` + tableLeases + ` (shard INTEGER PRIMARY KEY, owner TEXT NOT NULL, expires BIGINT NOT NULL)`,
		`CREATE TABLE IF NOT EXISTS ` + tableRelays + ` (id TEXT PRIMARY KEY, expires BIGINT NOT NULL)`,
	}
}

// q spells query, written with "?" placeholders, for d.
func (d Dialect) q(query string) string { return sqldb.Rebind(d == PostgreSQL, query) }

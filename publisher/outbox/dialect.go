package outbox

import "github.com/keyorder/keyorder/internal/sqldb"

// A Dialect names the SQL database an [Outbox] runs on. The outbox speaks
// only database/sql: the caller opens the *sql.DB with the driver of its
// choice (modernc.org/sqlite, pgx's stdlib) and names its dialect. It is
// the inbox's type too: inbox.PostgreSQL and PostgreSQL are one value.
type Dialect = sqldb.Dialect

const (
	// SQLite is SQLite 3.35 or later. Open it in WAL mode with a busy
	// timeout, so that writers of several connections wait their turn;
	// the outbox's writes take SQLite's one write lock like any other.
	SQLite = sqldb.SQLite
	// PostgreSQL is PostgreSQL 13 or later, at any isolation level from
	// READ COMMITTED (its default) up.
	PostgreSQL = sqldb.PostgreSQL
)

// tables are the names of an outbox's tables, made from the name
// [WithTable] gives, keyorder_outbox by default. events holds the pending
// events, a row each until a relay has published it; keys the last number
// given to each key, the counter row that numbers a key's events in
// commit order; sent the highest number a relay has sent of each key;
// meta what every process must share (the producer ID, the shard count,
// the relays' topic); leases which relay publishes which shard, and
// relays the relays alive. channel is what relays LISTEN on (PostgreSQL).
type tables struct {
	events, keys, sent, meta, leases, relays, channel string
}

func tablesOf(name string) tables {
	return tables{events: name, keys: name + "_keys", sent: name + "_sent", meta: name + "_meta",
		leases: name + "_leases", relays: name + "_relays", channel: name}
}

// schema returns the statements that create the tables if missing, and
// the columns each must have. Numbers are BIGINT, which both take; data
// is the one column whose type differs.
func schema(d Dialect, t tables) (stmts []string, columns map[string][]string) {
	blob := "BLOB"
	if d == PostgreSQL {
		blob = "BYTEA"
	}
	stmts = []string{
		`CREATE TABLE IF NOT EXISTS ` + t.meta + ` (name TEXT PRIMARY KEY, value TEXT NOT NULL)`,
		`CREATE TABLE IF NOT EXISTS ` + t.keys + ` (key TEXT PRIMARY KEY, last BIGINT NOT NULL)`,
		`CREATE TABLE IF NOT EXISTS ` + t.events + ` (key TEXT NOT NULL, seq BIGINT NOT NULL,
			shard INTEGER NOT NULL, data ` + blob + `, headers TEXT NOT NULL, created BIGINT NOT NULL,
			sent INTEGER NOT NULL DEFAULT 0, PRIMARY KEY (key, seq))`,
		`CREATE TABLE IF NOT EXISTS ` + t.sent + ` (key TEXT PRIMARY KEY, upto BIGINT NOT NULL)`,
		`CREATE TABLE IF NOT EXISTS ` + t.leases + ` (shard INTEGER PRIMARY KEY, owner TEXT NOT NULL, expires BIGINT NOT NULL)`,
		`CREATE TABLE IF NOT EXISTS ` + t.relays + ` (id TEXT PRIMARY KEY, expires BIGINT NOT NULL)`,
	}
	columns = map[string][]string{
		t.meta:   {"name", "value"},
		t.keys:   {"key", "last"},
		t.sent:   {"key", "upto"},
		t.events: {"created", "data", "headers", "key", "sent", "seq", "shard"},
		t.leases: {"expires", "owner", "shard"},
		t.relays: {"expires", "id"},
	}
	return stmts, columns
}

// notify returns the statements that make every insert into the events
// table NOTIFY t.channel at commit (PostgreSQL): a trigger per statement,
// so that Add costs its writer no statement more, and one notification
// per transaction, which PostgreSQL folds together.
func notify(t tables) (function, trigger string) {
	function = `CREATE OR REPLACE FUNCTION ` + t.events + `_notify() RETURNS trigger LANGUAGE plpgsql AS
		$$ BEGIN PERFORM pg_notify('` + t.channel + `', ''); RETURN NULL; END $$`
	trigger = `CREATE TRIGGER ` + t.events + `_notify AFTER INSERT ON ` + t.events +
		` FOR EACH STATEMENT EXECUTE FUNCTION ` + t.events + `_notify()`
	return function, trigger
}

package inbox

import (
	"strings"

	"github.com/keyorder/keyorder/internal/sqldb"
)

// A Dialect names the SQL database an [Inbox] runs on. The inbox speaks
// only database/sql: the caller opens the *sql.DB with the driver of its
// choice (modernc.org/sqlite, pgx's stdlib adapter...) and names it here.
// It is the outbox's type too: outbox.PostgreSQL and PostgreSQL are one
// value.
type Dialect = sqldb.Dialect

const (
	// SQLite, 3.35 or later. Its writers take turns on the whole
	// database, which is the inbox's lock; the DSN must set a busy
	// timeout, so that replicas wait for their turn rather than fail, and
	// should set _txlock=immediate (modernc.org/sqlite), so that the
	// caller's own transactions cannot deadlock on a lock upgrade.
	SQLite = sqldb.SQLite
	// PostgreSQL, 9.5 or later, at any isolation level: the inbox locks
	// the row of the message's (key, producer) with its first statement.
	PostgreSQL = sqldb.PostgreSQL
)

// schema is the inbox's two tables: one row per (key, producer), the
// highest number applied and the gap its next message waits on, if any;
// and the runs of numbers owed, lo to hi, one per gap recorded, each
// shortened as its numbers come. touched, in Unix seconds, is when a
// message last read the row, for Prune, which scans the table for it: an
// index on it would be written with every message, for a scan made once a
// day. wait_seq above last_seq says a gap's wait is open: wait_seq is the
// number of the message that began it, and wait_since, in Unix
// milliseconds, when (the row's one clock, gapped). The row whose key and
// producer are empty holds when the table was made (qMade).
const schema = `
CREATE TABLE IF NOT EXISTS {t} (
	key        TEXT   NOT NULL,
	producer   TEXT   NOT NULL,
	last_seq   BIGINT NOT NULL,
	prev_seq   BIGINT NOT NULL DEFAULT 0,
	wait_seq   BIGINT NOT NULL DEFAULT 0,
	wait_since BIGINT NOT NULL DEFAULT 0,
	touched    BIGINT NOT NULL,
	PRIMARY KEY (key, producer)
);
CREATE TABLE IF NOT EXISTS {t}_owed (
	key      TEXT   NOT NULL,
	producer TEXT   NOT NULL,
	lo       BIGINT NOT NULL,
	hi       BIGINT NOT NULL,
	PRIMARY KEY (key, producer, lo)
)`

// The queries, written with "?" and the table as {t}; queries rewrites
// them for the dialect and the table.
const (
	// qLock is the first statement of every message's transaction: it
	// makes the (key, producer) row if there is none, and writes it if
	// there is, which takes its lock (PostgreSQL's row lock, SQLite's
	// write lock) before anything is read, and returns the row as it is
	// once the lock is held: a replica that waited for it sees what the
	// other committed (S12's global view). prev_seq returns the highest
	// number as it was, for the rule (classify) to judge. The same write
	// records the message as applied when its number is the next
	// ({next}), the case of nearly every message, so that it costs one
	// statement, not two; apply's failure rolls it back with the rest. A
	// new row is made with the message's number, as the next after 0
	// when it is number 1 of its epoch; when it is not, the rule finds a
	// gap, and its wait writes the row's highest back to 0 (gapped). It
	// touches the row whatever the number, so that a record a message
	// reads, a copy's or a wait's, is not idle (Prune).
	qLock = `INSERT INTO {t} (key, producer, last_seq, touched) VALUES (?, ?, ?, ?)
		ON CONFLICT (key, producer) DO UPDATE SET
			prev_seq = {t}.last_seq,
			last_seq = CASE WHEN {next} THEN excluded.last_seq ELSE {t}.last_seq END,
			wait_seq = CASE WHEN {next} THEN 0 ELSE {t}.wait_seq END,
			touched  = excluded.touched
		RETURNING prev_seq, last_seq, wait_seq, wait_since`
	// sqlNext is classify's "next" in SQL, excluded.last_seq the message's
	// number and {t}.last_seq the highest applied: the number after it in
	// its epoch, or the first of a higher epoch (an epoch is the number
	// divided by 2^32). It is never true where classify's is not, and
	// where classify says next and it was not, the handler records the
	// number with qApplied.
	sqlNext = `((excluded.last_seq = {t}.last_seq + 1 AND excluded.last_seq / 4294967296 = {t}.last_seq / 4294967296)
		OR (excluded.last_seq / 4294967296 > {t}.last_seq / 4294967296 AND excluded.last_seq % 4294967296 = 1))`
	qApplied  = `UPDATE {t} SET last_seq = ?, wait_seq = 0, wait_since = 0, touched = ? WHERE key = ? AND producer = ?`
	qWait     = `UPDATE {t} SET last_seq = ?, wait_seq = ?, wait_since = ? WHERE key = ? AND producer = ?`
	qFindOwed = `SELECT lo, hi FROM {t}_owed WHERE key = ? AND producer = ? AND lo <= ? AND hi >= ?`
	qDelOwed  = `DELETE FROM {t}_owed WHERE key = ? AND producer = ? AND lo = ?`
	qAddOwed  = `INSERT INTO {t}_owed (key, producer, lo, hi) VALUES (?, ?, ?, ?)`
	// Prune forgets the idle producers, but never the made row (key ''),
	// a row whose gap's wait is open, or one with numbers owed: a late
	// number needs them, to be applied in place rather than wait again.
	// Then the runs owed of producers no row holds, should a hand have
	// deleted their rows.
	qPrune = `DELETE FROM {t} WHERE touched < ? AND key <> '' AND wait_seq <= last_seq AND NOT EXISTS
		(SELECT 1 FROM {t}_owed WHERE {t}_owed.key = {t}.key AND {t}_owed.producer = {t}.producer)`
	qPruneOrphan = `DELETE FROM {t}_owed WHERE NOT EXISTS
		(SELECT 1 FROM {t} WHERE {t}.key = {t}_owed.key AND {t}.producer = {t}_owed.producer)`
	// The made row, key and producer '', which no stamped message has
	// (Handler refuses an empty key): wait_since holds when the table was
	// made, in Unix milliseconds, and touched the same in seconds.
	qMade    = `INSERT INTO {t} (key, producer, last_seq, touched, wait_since) VALUES ('', '', 0, ?, ?) ON CONFLICT (key, producer) DO NOTHING`
	qMadeGet = `SELECT wait_since FROM {t} WHERE key = '' AND producer = ''`
)

// queries holds the inbox's statements, rewritten once by New.
type queries struct {
	lock, applied, wait, findOwed, delOwed, addOwed, prune, pruneOrphan string
}

func newQueries(d Dialect, table string) queries {
	q := func(s string) string {
		s = strings.ReplaceAll(s, "{next}", sqlNext)
		return sqldb.Rebind(d == PostgreSQL, strings.ReplaceAll(s, "{t}", table))
	}
	return queries{
		lock: q(qLock), applied: q(qApplied), wait: q(qWait),
		findOwed: q(qFindOwed), delOwed: q(qDelOwed), addOwed: q(qAddOwed),
		prune: q(qPrune), pruneOrphan: q(qPruneOrphan),
	}
}

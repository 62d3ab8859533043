// Package sqlitetest opens SQLite databases (modernc.org/sqlite, pure Go)
// for the tests, in files of their own, set as a service would set them.
package sqlitetest

import (
	"database/sql"
	"path/filepath"
	"testing"

	_ "modernc.org/sqlite" // registers the "sqlite" driver
)

// Driver is the database/sql driver name of DSN's DSNs.
const Driver = "sqlite"

// DSN is the DSN of a database in the file at path: WAL, so that readers
// do not wait on the writer; a busy timeout, so that writers of several
// connections or processes wait their turn rather than fail; and
// immediate transactions, which take the write lock at BEGIN, so that two
// transactions that read and then write cannot deadlock on the upgrade.
func DSN(path string) string {
	return "file:" + path + "?_pragma=busy_timeout(20000)&_pragma=journal_mode(WAL)&_pragma=synchronous(NORMAL)&_txlock=immediate"
}

// Open opens a database in a new file under tb's temporary directory, and
// closes it when tb ends.
func Open(tb testing.TB) *sql.DB {
	tb.Helper()
	db, err := sql.Open(Driver, DSN(filepath.Join(tb.TempDir(), "test.db")))
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = db.Close() })
	return db
}

// Fresh makes a database in a new file under tb's temporary directory,
// turned to WAL by one connection, and returns its DSN, for handles that
// several "processes" open at once: connections that turn a new file to
// WAL together may get SQLITE_BUSY at connect without waiting, which is
// the DSN's doing, not the code under test's. Once a file is WAL it stays
// so, and connects wait out the busy timeout.
func Fresh(tb testing.TB) string {
	tb.Helper()
	dsn := DSN(filepath.Join(tb.TempDir(), "test.db"))
	db, err := sql.Open(Driver, dsn)
	if err != nil {
		tb.Fatal(err)
	}
	defer db.Close()
	if err := db.Ping(); err != nil {
		tb.Fatal(err)
	}
	return dsn
}

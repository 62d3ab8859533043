// Package dbtest is the home of the tests that need a database driver:
// the outbox's and the inbox's, on SQLite and on PostgreSQL, and the
// end-to-end test of both. It is a module of its own, joined to the
// library's by go.work, so that a user of the library never gets the
// drivers (modernc.org/sqlite, pgx) in their module graph: the library's
// publisher/outbox and subscriber/inbox speak only database/sql.
package dbtest

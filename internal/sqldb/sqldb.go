// Package sqldb holds what the outbox and the inbox share about the SQL
// databases they run on: the spelling of placeholders. Both speak only
// database/sql, so that the library imports no driver; a caller opens the
// database with the driver of its choice and names its dialect.
package sqldb

import (
	"strconv"
	"strings"
)

// Rebind rewrites a query written with "?" placeholders for PostgreSQL,
// whose placeholders are numbered ($1, $2...); SQLite takes "?" as it is.
// The queries it is given are the packages' own, none with a "?" inside
// a literal.
func Rebind(postgres bool, query string) string {
	if !postgres || !strings.Contains(query, "?") {
		return query
	}
	var b strings.Builder
	b.Grow(len(query) + 8)
	n := 0
	for i := 0; i < len(query); i++ {
		if query[i] != '?' {
			b.WriteByte(query[i])
			continue
		}
		n++
		b.WriteByte('$')
		b.WriteString(strconv.Itoa(n))
	}
	return b.String()
}

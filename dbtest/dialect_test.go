package dbtest

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/keyorder/keyorder/publisher/outbox"
	"github.com/keyorder/keyorder/subscriber/inbox"
)

// TestOneDialect: the outbox's and the inbox's Dialect are one type, so
// that a program names its database once for both.
func TestOneDialect(t *testing.T) {
	var d outbox.Dialect = inbox.PostgreSQL
	assert.Equal(t, outbox.PostgreSQL, d)
	var e inbox.Dialect = outbox.SQLite
	assert.Equal(t, inbox.SQLite, e)
}

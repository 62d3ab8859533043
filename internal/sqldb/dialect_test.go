package sqldb

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestDialect(t *testing.T) {
	assert.Equal(t, "SQLite", SQLite.String())
	assert.Equal(t, "PostgreSQL", PostgreSQL.String())
	assert.Equal(t, "Dialect(7)", Dialect(7).String())
	assert.True(t, SQLite.Valid())
	assert.True(t, PostgreSQL.Valid())
	assert.False(t, Dialect(0).Valid())
	assert.Equal(t, "SELECT ? + ?", SQLite.Rebind("SELECT ? + ?"))
	assert.Equal(t, "SELECT $1 + $2", PostgreSQL.Rebind("SELECT ? + ?"))
	assert.NotEqual(t, SQLite.probe(), PostgreSQL.probe())
}

package sqldb

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestRebind(t *testing.T) {
	q := "UPDATE t SET n = n + ? WHERE k = ? AND p = ?"
	assert.Equal(t, q, Rebind(false, q))
	assert.Equal(t, "UPDATE t SET n = n + $1 WHERE k = $2 AND p = $3", Rebind(true, q))
	assert.Equal(t, "SELECT 1", Rebind(true, "SELECT 1"))
}

package pgtest

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestMain(m *testing.M) { Main(m) }

// TestServer starts the server and checks that two databases are apart.
func TestServer(t *testing.T) {
	a, b := Open(t), Open(t)
	_, err := a.Exec("CREATE TABLE x (n INTEGER)")
	require.NoError(t, err)
	_, err = b.Exec("SELECT n FROM x")
	require.Error(t, err, "a table of one database is not in another")
	var v string
	require.NoError(t, a.QueryRow("SHOW server_version").Scan(&v))
	t.Logf("PostgreSQL %s", v)
}

package pgtest

import (
	"database/sql"
	"os"
	"path/filepath"
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

// TestPrivate checks that the server's directory and socket, which trust
// whoever connects, are its user's alone.
func TestPrivate(t *testing.T) {
	Open(t)
	dir := Shared().Dir()
	st, err := os.Stat(dir)
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o700), st.Mode().Perm(), "the directory")
	st, err = os.Stat(filepath.Join(dir, ".s.PGSQL.5432"))
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o700), st.Mode().Perm(), "the socket")
}

// TestDurable checks that the shared server skips what makes a commit
// durable, unless DurableEnv is set, and that one started with DurableEnv
// set does it all.
func TestDurable(t *testing.T) {
	settings := func(db *sql.DB) (s [3]string) {
		for i, name := range []string{"fsync", "synchronous_commit", "full_page_writes"} {
			require.NoError(t, db.QueryRow("SHOW "+name).Scan(&s[i]))
		}
		return s
	}
	shared := "off"
	if os.Getenv(DurableEnv) == "1" {
		shared = "on"
	}
	require.Equal(t, [3]string{shared, shared, shared}, settings(Open(t)), "the shared server")

	t.Setenv(DurableEnv, "1")
	s, err := Start()
	require.NoError(t, err)
	defer func() { require.NoError(t, s.Stop()) }()
	dsn, err := s.NewDatabase()
	require.NoError(t, err)
	db, err := sql.Open(Driver, dsn)
	require.NoError(t, err)
	defer db.Close()
	require.Equal(t, [3]string{"on", "on", "on"}, settings(db), "a server started with "+DurableEnv+"=1")
}

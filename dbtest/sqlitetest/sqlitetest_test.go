package sqlitetest

import (
	"database/sql"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/keyorder/keyorder/internal/leaktest"
)

func TestMain(m *testing.M) { leaktest.VerifyTestMain(m) }

// TestOpen checks that the settings DSN promises are in force.
func TestOpen(t *testing.T) {
	db := Open(t)
	var mode string
	require.NoError(t, db.QueryRow("PRAGMA journal_mode").Scan(&mode))
	require.Equal(t, "wal", mode)
	var timeout int
	require.NoError(t, db.QueryRow("PRAGMA busy_timeout").Scan(&timeout))
	require.Equal(t, 20000, timeout)
}

// TestFresh checks that Fresh's file is WAL before any other handle opens.
func TestFresh(t *testing.T) {
	dsn := Fresh(t)
	db, err := sql.Open(Driver, strings.Replace(dsn, "&_pragma=journal_mode(WAL)", "", 1))
	require.NoError(t, err)
	defer db.Close()
	var mode string
	require.NoError(t, db.QueryRow("PRAGMA journal_mode").Scan(&mode))
	require.Equal(t, "wal", mode)
}

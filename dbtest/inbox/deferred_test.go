package inbox_test

import (
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/keyorder/keyorder/dbtest/sqlitetest"
	"github.com/keyorder/keyorder/subscriber"
	"github.com/keyorder/keyorder/subscriber/inbox"
)

// TestSQLiteDeferred: on SQLite without _txlock=immediate, the inbox's
// first statement is a write, which takes the write lock before anything
// is read, so that concurrent copies still apply once.
func TestSQLiteDeferred(t *testing.T) {
	t.Parallel()
	ctx := timeout(t, testTimeout)
	path := t.TempDir() + "/deferred.db"
	dsn := strings.Replace(sqlitetest.DSN(path), "&_txlock=immediate", "", 1)
	require.NotContains(t, dsn, "_txlock")
	one, two := openDSN(t, sqlitetest.Driver, dsn), openDSN(t, sqlitetest.Driver, dsn)
	handlers := []subscriber.Handler{
		newInbox(t, one, inbox.SQLite).Handler(record(inbox.SQLite)),
		newInbox(t, two, inbox.SQLite).Handler(record(inbox.SQLite)),
	}
	const per, replicas = 30, 4
	var wg sync.WaitGroup
	errs := make(chan error, per*replicas)
	for r := range replicas {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := uint32(1); n <= per; n++ {
				errs <- handlers[r%2](ctx, delivery("k", "p", n))
			}
		}()
	}
	wg.Wait()
	close(errs)
	failed := 0
	for err := range errs {
		if err != nil {
			failed++
			t.Log(err)
		}
	}
	times, _ := applied(t, one)
	for k, n := range times {
		assert.Equal(t, 1, n, "%s applied %d times", k, n)
	}
	assert.Zero(t, failed)
}

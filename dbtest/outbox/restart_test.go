package outbox_test

import (
	"database/sql"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/keyorder/keyorder/dbtest/pgtest"
	"github.com/keyorder/keyorder/internal/harness"
	"github.com/keyorder/keyorder/ordering/orderingtest"
	"github.com/keyorder/keyorder/publisher"
	"github.com/keyorder/keyorder/publisher/outbox"
)

// TestRelayAcrossDatabaseRestart shuts PostgreSQL down under a relay
// that is publishing, as an operator's restart does, and starts it again.
// Writers commit through an outbox of their own (no wake from Add in the
// relay's process), so the relay learns of commits from its listener,
// and its poll is a minute: longer than the test waits after the restart.
//
// While the server is down, an Add fails with an error, and the relay
// logs its failures and goes on. Once it is up again, one transaction
// adds a last event to each key, and nothing is written after it: the
// relay must take its shards again, listen again, and read what was
// committed while it was not listening, within restartWait. Every
// committed event must then be on the topic, its first copy in commit
// order per key, every copy a counted re-send, and the outbox empty.
func TestRelayAcrossDatabaseRestart(t *testing.T) {
	t.Parallel()
	k := kinds[1]
	require.Equal(t, outbox.PostgreSQL, k.dialect)
	srv, dsn := pgtest.Own(t)

	ctx := harness.Context(t, testTimeout)
	db, writerDB := k.openDSN(t, dsn), k.openDSN(t, dsn)
	ob, wob := newOutbox(t, ctx, db, k), newOutbox(t, ctx, writerDB, k)
	e := newEnv(t, orderingtest.WithLatency(20*time.Millisecond))
	var logs harness.Buffer
	r, err := outbox.NewRelay(ob, e.publisher(t), outbox.WithLease(time.Second), outbox.WithPollInterval(time.Minute),
		outbox.WithListener(pgtest.Listener(dsn)), outbox.WithLogger(slog.New(slog.NewJSONHandler(&logs, nil))))
	require.NoError(t, err)
	runRelay(t, r)

	stop := make(chan struct{})
	written := writers(t, ctx, writerDB, wob, 20, stop)
	waitFor(t, e, "the relay to publish", func() bool { return len(e.srv.Messages(e.topic)) >= 300 })
	close(stop)
	want := written()
	atDown := len(e.srv.Messages(e.topic))
	require.NoError(t, srv.Down())

	_, err = writerDB.BeginTx(ctx, nil)
	require.Error(t, err, "a transaction while the server is down")
	// The relay's lease rounds fail, and its listener ends.
	waitFor(t, e, "the relay to log the server's absence", func() bool {
		return strings.Contains(logs.String(), "renew leases") && strings.Contains(logs.String(), "listen for commits")
	})
	require.NoError(t, srv.Up())

	// A service retries a transaction that failed on a connection the
	// restart broke: the pool's idle ones did.
	last := make(map[string]string)
	require.Eventually(t, func() bool {
		tx, err := writerDB.BeginTx(ctx, nil)
		if err != nil {
			return false
		}
		for key := range want {
			last[key] = key + "/last"
			if err := wob.Add(ctx, tx, key, &publisher.Message{Data: []byte(last[key])}); err != nil {
				_ = tx.Rollback()
				return false
			}
		}
		return tx.Commit() == nil
	}, restartWait, 50*time.Millisecond, "a transaction once the server is up")
	for key, d := range last {
		want[key] = append(want[key], d)
	}

	wantN := events(want)
	// Not waitFor: its bound is testTimeout, longer than the poll.
	waitWithin(t, restartWait, func() bool {
		return pendingOrNot(db) == 0 && events(e.view(t, ob.Producer()).firsts) >= wantN
	}, func() string {
		t.Logf("the relay's log:\n%s\nits stats: %+v", logs.String(), r.Stats())
		return fmt.Sprintf("after the restart, %d of %d events on the topic, and %d in the outbox, within %v (the relay's poll is a minute)",
			events(e.view(t, ob.Producer()).firsts), wantN, pendingOrNot(db), restartWait)
	})
	v := e.view(t, ob.Producer())
	assert.Empty(t, v.disorder)
	assert.Equal(t, want, v.firsts, "every committed event, once, in commit order")
	assert.LessOrEqual(t, v.copies, int(r.Stats().Resent), "every copy is a counted re-send")
	t.Logf("%d events, %d on the topic at the shutdown; %d copies, %d counted re-sent", wantN, atDown, v.copies, r.Stats().Resent)
}

// restartWait bounds how long a relay may take to publish what was
// committed after the database came back: well under its poll.
const restartWait = 30 * time.Second

// pendingOrNot counts the events left in the outbox, or returns -1 if
// the count fails.
func pendingOrNot(db *sql.DB) int {
	n, err := countPending(db)
	if err != nil {
		return -1
	}
	return n
}

// events counts the events of byKey.
func events(byKey map[string][]string) int {
	n := 0
	for _, ds := range byKey {
		n += len(ds)
	}
	return n
}

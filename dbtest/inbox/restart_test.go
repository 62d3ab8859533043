package inbox_test

import (
	"context"
	"database/sql"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/keyorder/keyorder/dbtest/pgtest"
	"github.com/keyorder/keyorder/ordering"
	"github.com/keyorder/keyorder/ordering/orderingtest"
	"github.com/keyorder/keyorder/subscriber"
	"github.com/keyorder/keyorder/subscriber/inbox"
)

// TestInboxAcrossDatabaseRestart shuts PostgreSQL down under a Receive
// whose handler is the inbox's, as an operator's restart does, while one
// message's transaction is open and messages keep coming, and starts it
// again. While it is down, every call fails, and the subscriber holds the
// keys and redelivers. Once the server is up, every number of every key
// must be applied once, in order, on connections the inbox opens anew.
func TestInboxAcrossDatabaseRestart(t *testing.T) {
	t.Parallel()
	pg, dsn := pgtest.Own(t)

	ctx := timeout(t, testTimeout)
	srv := orderingtest.Start(t, orderingtest.WithAckDeadline(300*time.Millisecond))
	client := connect(t, ctx, srv)
	topic, subID := names()
	sub, err := subscriber.CreateWithTopic(ctx, client, topic, subID, fast, quiet)
	require.NoError(t, err)
	one := openDSN(t, pgtest.Driver, dsn)
	ib := newInbox(t, one, inbox.PostgreSQL)
	// a's 15th waits in its transaction for the shutdown.
	rec := record(inbox.PostgreSQL)
	inTx, release := make(chan struct{}), make(chan struct{})
	var held atomic.Bool
	h := ib.Handler(func(ctx context.Context, tx *sql.Tx, d *subscriber.Delivery) error {
		if d.Key == "a" && d.Seq == ordering.MakeSeq(0, 15) && held.CompareAndSwap(false, true) {
			close(inTx)
			select {
			case <-release:
			case <-ctx.Done():
			}
		}
		return rec(ctx, tx, d)
	})
	var failed atomic.Int64
	stop := run(t, sub, func(ctx context.Context, d *subscriber.Delivery) error {
		err := h(ctx, d)
		if err != nil {
			failed.Add(1)
		}
		return err
	})
	keys := []string{"a", "b", "c", "d"}
	const n = 30

	publishStamped(t, client, sub.Topic(), messages(keys, 1, 20)...)
	select {
	case <-inTx:
	case <-ctx.Done():
		t.Fatal("a's 15th never reached the handler")
	}
	require.NoError(t, pg.Down())
	close(release)
	publishStamped(t, client, sub.Topic(), messages(keys, 21, 25)...)
	require.NoError(t, srv.WaitFor(ctx, func() bool { return failed.Load() >= int64(len(keys)) }),
		"every key's handler fails while the server is down: %d failed, %+v", failed.Load(), srv.Stats(sub.Name()))
	require.NoError(t, pg.Up())
	publishStamped(t, client, sub.Topic(), messages(keys, 26, n)...)
	waitApplied(t, srv, one, len(keys)*n)
	require.NoError(t, srv.WaitFor(ctx, func() bool { return srv.Stats(sub.Name()).Outstanding == 0 }))
	stop()
	requireOnceInOrder(t, one, keys, n)
	t.Logf("%d calls failed while the server was down; inbox copies %d", failed.Load(), ib.Stats().Copies)
}

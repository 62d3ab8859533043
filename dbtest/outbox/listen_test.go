package outbox_test

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/keyorder/keyorder/internal/harness"
	"github.com/keyorder/keyorder/publisher"
	"github.com/keyorder/keyorder/publisher/outbox"
)

// TestListenerSparesLooks holds a writer's transaction open after its
// Add on two PostgreSQL databases: a relay without a listener looks for
// the commit, again and again, while the transaction lasts; a relay whose
// listener listens reads nothing until the commit's notification, then
// publishes. The first relay's looks are the test's clock.
func TestListenerSparesLooks(t *testing.T) {
	t.Parallel()
	k := kinds[1]
	require.Equal(t, outbox.PostgreSQL, k.dialect)
	ctx := harness.Context(t, testTimeout)
	type side struct {
		db    *sql.DB
		reads *atomic.Int64
		ob    *outbox.Outbox
		e     *env
		r     *outbox.Relay
		tx    *sql.Tx
	}
	notify := make(chan struct{}, 1)
	listener := func(ctx context.Context, channel string) (<-chan struct{}, error) {
		ch := make(chan struct{}, 1)
		go func() {
			defer close(ch)
			for {
				select {
				case <-ctx.Done():
					return
				case <-notify:
					ch <- struct{}{}
				}
			}
		}()
		return ch, nil
	}
	open := func(opts ...outbox.RelayOption) *side {
		s := &side{e: newEnv(t)}
		s.db, s.reads = openCounting(t, k, k.dsn(t))
		s.ob = newOutbox(t, ctx, s.db, k)
		var err error
		s.r, err = outbox.NewRelay(s.ob, s.e.publisher(t), append(opts, outbox.WithPollInterval(time.Minute), outbox.WithLogger(quiet))...)
		require.NoError(t, err)
		runRelay(t, s.r)
		waitFor(t, s.e, "the shards and the first poll", func() bool {
			return s.r.Stats().Shards == s.ob.Shards() && s.reads.Load() > 0
		})
		return s
	}
	looking, listening := open(), open(outbox.WithListener(listener))
	before := listening.reads.Load()
	for _, s := range []*side{looking, listening} {
		var err error
		s.tx, err = s.db.BeginTx(ctx, nil)
		require.NoError(t, err)
		require.NoError(t, s.ob.Add(ctx, s.tx, "a", &publisher.Message{Data: []byte("a1")}))
	}
	from := looking.reads.Load()
	waitFor(t, looking.e, "the relay without a listener to look ten times", func() bool {
		return looking.reads.Load() >= from+10
	})
	assert.Equal(t, before, listening.reads.Load(), "the relay with a listener read while the transaction was open")
	for _, s := range []*side{looking, listening} {
		require.NoError(t, s.tx.Commit())
	}
	notify <- struct{}{}
	for _, s := range []*side{looking, listening} {
		waitFor(t, s.e, "the event", func() bool { return len(s.e.srv.Messages(s.e.topic)) == 1 })
	}
}

// openCounting opens dsn with k's driver, and counts the statements that
// read pending events' rows, as a relay's pages do.
func openCounting(t testing.TB, k dbKind, dsn string) (*sql.DB, *atomic.Int64) {
	t.Helper()
	drv := k.openDSN(t, dsn).Driver()
	n := new(atomic.Int64)
	db := sql.OpenDB(countingConnector{dsn: dsn, drv: drv, n: n})
	t.Cleanup(func() { _ = db.Close() })
	return db, n
}

type countingConnector struct {
	dsn string
	drv driver.Driver
	n   *atomic.Int64
}

func (c countingConnector) Connect(context.Context) (driver.Conn, error) {
	conn, err := c.drv.Open(c.dsn)
	if err != nil {
		return nil, err
	}
	return countingConn{conn.(wholeConn), c.n}, nil
}

func (c countingConnector) Driver() driver.Driver { return c.drv }

// wholeConn is what database/sql uses of a driver's connection.
type wholeConn interface {
	driver.Conn
	driver.ConnBeginTx
	driver.ExecerContext
	driver.QueryerContext
	driver.Pinger
}

type countingConn struct {
	wholeConn
	n *atomic.Int64
}

func (c countingConn) QueryContext(ctx context.Context, q string, args []driver.NamedValue) (driver.Rows, error) {
	if strings.HasPrefix(q, "SELECT key, seq, shard, data, headers, sent FROM") {
		c.n.Add(1)
	}
	return c.wholeConn.QueryContext(ctx, q, args)
}

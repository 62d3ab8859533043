package outbox_test

import (
	"context"
	"database/sql"
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
	listener := forward(notify)
	open := func(opts ...outbox.RelayOption) *side {
		s := &side{e: newEnv(t)}
		s.reads = new(atomic.Int64)
		s.db = openHooked(t, k, k.dsn(t), hooks{query: func(q string) error {
			if strings.HasPrefix(q, pageRead) {
				s.reads.Add(1)
			}
			return nil
		}})
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

// TestPollOnlyWhenIdle wakes a relay through its listener every 40 ms
// for two seconds, with a poll interval of 300 ms: each wake reads once,
// and no poll reads between them, since each read puts the poll off (a
// poll on a fixed beat read 5 times more in those two seconds). Left
// alone, the relay polls again.
func TestPollOnlyWhenIdle(t *testing.T) {
	t.Parallel()
	k := kinds[1]
	require.Equal(t, outbox.PostgreSQL, k.dialect)
	ctx := harness.Context(t, testTimeout)
	var reads atomic.Int64
	db := openHooked(t, k, k.dsn(t), hooks{query: func(q string) error {
		if strings.HasPrefix(q, pageRead) {
			reads.Add(1)
		}
		return nil
	}})
	ob, e := newOutbox(t, ctx, db, k), newEnv(t)
	wakes := make(chan struct{})
	listener := forward(wakes)
	r, err := outbox.NewRelay(ob, e.publisher(t), outbox.WithListener(listener),
		outbox.WithPollInterval(300*time.Millisecond), outbox.WithLogger(quiet))
	require.NoError(t, err)
	runRelay(t, r)
	waitFor(t, e, "the shards and the first poll", func() bool { return r.Stats().Shards == ob.Shards() && reads.Load() > 0 })
	from := reads.Load()
	const n = 50
	tick := time.NewTicker(40 * time.Millisecond) // the wakes' pace, not a synchronisation
	defer tick.Stop()
	for range n {
		<-tick.C
		wakes <- struct{}{}
	}
	waitFor(t, e, "the last wake's read", func() bool { return reads.Load() >= from+n })
	got := reads.Load() - from
	assert.LessOrEqual(t, got, int64(n+1), "reads besides the wakes': polls while the relay was busy")
	waitFor(t, e, "a poll, left alone", func() bool { return reads.Load() > from+got })
}

// forward returns a Listener that hands each signal of wakes on to the
// relay, waiting for the relay to take it.
func forward(wakes <-chan struct{}) outbox.Listener {
	return func(ctx context.Context, _ string) (<-chan struct{}, error) {
		ch := make(chan struct{})
		go func() {
			defer close(ch)
			for {
				select {
				case <-ctx.Done():
					return
				case <-wakes:
				}
				select {
				case ch <- struct{}{}: // taken by the relay's loop, which reads next
				case <-ctx.Done():
					return
				}
			}
		}()
		return ch, nil
	}
}

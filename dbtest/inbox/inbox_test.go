package inbox_test

import (
	"context"
	"database/sql"
	"errors"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/keyorder/keyorder/ordering"
	"github.com/keyorder/keyorder/subscriber"
	"github.com/keyorder/keyorder/subscriber/inbox"
)

// TestAppliesOnceAndAcksCopies: a message is applied once, and its copies,
// under new message IDs and through another Inbox on the same table, are
// acked unapplied.
func TestAppliesOnceAndAcksCopies(t *testing.T) {
	eachDatabase(t, func(t *testing.T, db database) {
		ctx := timeout(t, 30e9)
		one, two := db.open(t)
		a := newInbox(t, one, db.dialect)
		b := newInbox(t, two, db.dialect)
		ha, hb := a.Handler(record(db.dialect)), b.Handler(record(db.dialect))
		for n := uint32(1); n <= 3; n++ {
			require.NoError(t, ha(ctx, delivery("k", "p", n)))
		}
		for n := uint32(1); n <= 3; n++ {
			c := delivery("k", "p", n)
			c.ID += "-copy"
			require.NoError(t, hb(ctx, c), "a copy is acked")
			require.NoError(t, ha(ctx, c))
		}
		require.NoError(t, hb(ctx, delivery("k", "p", 4)))
		times, order := applied(t, one)
		assert.Equal(t, map[string]int{"k/0.1": 1, "k/0.2": 1, "k/0.3": 1, "k/0.4": 1}, times)
		assert.Equal(t, []uint64{1, 2, 3, 4}, order["k"])
		assert.Equal(t, inbox.Stats{Applied: 3, Copies: 3}, a.Stats())
		assert.Equal(t, inbox.Stats{Applied: 1, Copies: 3}, b.Stats())
	})
}

// TestProducersAndKeysApart: each (key, producer) has its own sequence.
func TestProducersAndKeysApart(t *testing.T) {
	eachDatabase(t, func(t *testing.T, db database) {
		ctx := timeout(t, 30e9)
		one, _ := db.open(t)
		h := newInbox(t, one, db.dialect).Handler(record(db.dialect))
		for _, d := range []*subscriber.Delivery{delivery("k", "p", 1), delivery("k", "q", 1), delivery("j", "p", 1), delivery("k", "p", 2)} {
			require.NoError(t, h(ctx, d))
		}
		times, _ := applied(t, one)
		assert.Len(t, times, 3, "k/p 1, k/q 1, j/p 1 and k/p 2: k/0.1 twice, by two producers")
		assert.Equal(t, 2, times["k/0.1"])
	})
}

// TestApplyErrorRollsBack: apply's error is the handler's, and nothing of
// the message is recorded, so that its retry applies it.
func TestApplyErrorRollsBack(t *testing.T) {
	eachDatabase(t, func(t *testing.T, db database) {
		ctx := timeout(t, 30e9)
		one, _ := db.open(t)
		ib := newInbox(t, one, db.dialect)
		boom := errors.New("boom")
		failing := ib.Handler(func(ctx context.Context, tx *sql.Tx, d *subscriber.Delivery) error {
			if err := record(db.dialect)(ctx, tx, d); err != nil {
				return err
			}
			return subscriber.Permanent(boom)
		})
		err := failing(ctx, delivery("k", "p", 1))
		require.ErrorIs(t, err, boom)
		var perm *subscriber.PermanentError
		require.ErrorAs(t, err, &perm, "apply's Permanent keeps its meaning")
		times, _ := applied(t, one)
		assert.Empty(t, times, "the failed call's effect was rolled back")

		require.NoError(t, ib.Handler(record(db.dialect))(ctx, delivery("k", "p", 1)))
		times, _ = applied(t, one)
		assert.Equal(t, map[string]int{"k/0.1": 1}, times, "the retry applied, not taken for a copy")
	})
}

// TestApplyPanicRollsBack: a panic in apply leaves no transaction open
// (on SQLite an open one would hold the write lock for ever).
func TestApplyPanicRollsBack(t *testing.T) {
	eachDatabase(t, func(t *testing.T, db database) {
		ctx := timeout(t, 30e9)
		one, two := db.open(t)
		ib := newInbox(t, one, db.dialect)
		h := ib.Handler(func(ctx context.Context, tx *sql.Tx, d *subscriber.Delivery) error { panic("apply") })
		require.Panics(t, func() { _ = h(ctx, delivery("k", "p", 1)) })
		require.NoError(t, newInbox(t, two, db.dialect).Handler(record(db.dialect))(ctx, delivery("k", "p", 1)))
		times, _ := applied(t, one)
		assert.Equal(t, map[string]int{"k/0.1": 1}, times)
	})
}

// TestConcurrentCopies: replicas handed the same message at the same
// moment, each through its own connection pool, apply it once between
// them, whatever the interleaving.
func TestConcurrentCopies(t *testing.T) {
	eachDatabase(t, func(t *testing.T, db database) {
		ctx := timeout(t, 60e9)
		one, two := db.open(t)
		handlers := []subscriber.Handler{
			newInbox(t, one, db.dialect).Handler(record(db.dialect)),
			newInbox(t, two, db.dialect).Handler(record(db.dialect)),
		}
		const keys, per, replicas = 4, 25, 4
		var wg sync.WaitGroup
		errs := make(chan error, keys*per*replicas)
		for k := range keys {
			key := string(rune('a' + k))
			for r := range replicas {
				wg.Add(1)
				go func() {
					defer wg.Done()
					h := handlers[r%2]
					for n := uint32(1); n <= per; n++ {
						errs <- h(ctx, delivery(key, "p", n))
					}
				}()
			}
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			require.NoError(t, err)
		}
		times, order := applied(t, one)
		require.Len(t, times, keys*per)
		for k, n := range times {
			assert.Equal(t, 1, n, "%s applied %d times", k, n)
		}
		for key, seqs := range order {
			for i, s := range seqs {
				assert.Equal(t, ordering.MakeSeq(0, uint32(i+1)), s, "key %s in order", key)
			}
		}
	})
}

// TestUnstamped: a message without a stamp or a key is refused for good,
// or, with WithUnstampedAtLeastOnce, applied without a record.
func TestUnstamped(t *testing.T) {
	eachDatabase(t, func(t *testing.T, db database) {
		ctx := timeout(t, 30e9)
		one, _ := db.open(t)
		bare := &subscriber.Delivery{ID: "m1", Key: "k"}
		unkeyed := delivery("", "p", 1)
		refusing := newInbox(t, one, db.dialect)
		for _, d := range []*subscriber.Delivery{bare, unkeyed} {
			err := refusing.Handler(record(db.dialect))(ctx, d)
			require.ErrorIs(t, err, inbox.ErrUnstamped)
			var perm *subscriber.PermanentError
			require.ErrorAs(t, err, &perm)
		}
		assert.Equal(t, int64(2), refusing.Stats().Unstamped)

		h := newInbox(t, one, db.dialect, inbox.WithUnstampedAtLeastOnce()).Handler(record(db.dialect))
		require.NoError(t, h(ctx, bare))
		require.NoError(t, h(ctx, bare))
		times, _ := applied(t, one)
		assert.Equal(t, 2, times["k/0.0"], "at least once: nothing tells its copies apart")
	})
}

// TestSeqBeyondInt64 refuses a number the table cannot hold.
func TestSeqBeyondInt64(t *testing.T) {
	eachDatabase(t, func(t *testing.T, db database) {
		one, _ := db.open(t)
		d := delivery("k", "p", 1)
		d.Seq = ordering.MakeSeq(1<<31, 1)
		err := newInbox(t, one, db.dialect).Handler(record(db.dialect))(timeout(t, 30e9), d)
		require.ErrorIs(t, err, inbox.ErrSeqRange)
	})
}

// TestNewTogether: replicas that start at once all create the tables, and
// none fails on the others' doing so.
func TestNewTogether(t *testing.T) {
	eachDatabase(t, func(t *testing.T, db database) {
		ctx := timeout(t, 30e9)
		one, two := db.open(t)
		errs := make(chan error, 8)
		for i := range 8 {
			go func() {
				_, err := inbox.New(ctx, []*sql.DB{one, two}[i%2], db.dialect)
				errs <- err
			}()
		}
		for range 8 {
			require.NoError(t, <-errs)
		}
	})
}

// TestClose: after Close, a handler applies nothing and returns
// ErrClosed, so that the subscription retries the message; a second
// Close is nil, and the database stays open for another Inbox.
func TestClose(t *testing.T) {
	eachDatabase(t, func(t *testing.T, db database) {
		ctx := timeout(t, 30e9)
		one, _ := db.open(t)
		in := newInbox(t, one, db.dialect)
		h := in.Handler(record(db.dialect))
		require.NoError(t, h(ctx, delivery("k", "p", 1)))
		require.NoError(t, in.Close())
		require.NoError(t, in.Close(), "Close is idempotent")
		err := h(ctx, delivery("k", "p", 2))
		require.ErrorIs(t, err, inbox.ErrClosed)
		times, _ := applied(t, one)
		assert.Equal(t, map[string]int{"k/0.1": 1}, times, "nothing applied after Close")

		again := newInbox(t, one, db.dialect)
		require.NoError(t, again.Handler(record(db.dialect))(ctx, delivery("k", "p", 2)))
		times, _ = applied(t, one)
		assert.Equal(t, map[string]int{"k/0.1": 1, "k/0.2": 1}, times)
	})
}

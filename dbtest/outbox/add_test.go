package outbox_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/keyorder/keyorder/internal/harness"
	"github.com/keyorder/keyorder/ordering"
	"github.com/keyorder/keyorder/publisher"
	"github.com/keyorder/keyorder/publisher/outbox"
)

// TestAddRefusesBadInput checks that bad input gets a typed error inside
// the transaction, before anything is written: the transaction commits
// with nothing in the outbox, and the key's next event is number 1.
func TestAddRefusesBadInput(t *testing.T) {
	t.Parallel()
	cases := badInputs()
	eachDB(t, func(t *testing.T, k dbKind) {
		t.Parallel()
		ctx := harness.Context(t, testTimeout)
		db := k.open(t)
		ob := newOutbox(t, ctx, db, k)
		assert.ErrorIs(t, ob.Add(ctx, nil, "k", &publisher.Message{Data: []byte("x")}), outbox.ErrNilTx)
		for _, tc := range cases {
			tx, err := db.BeginTx(ctx, nil)
			require.NoError(t, err)
			err = ob.Add(ctx, tx, tc.key, tc.msg)
			require.ErrorIs(t, err, tc.want, tc.name)
			if !errors.Is(tc.want, outbox.ErrNoKey) {
				var ve *publisher.ValidationError
				assert.ErrorAs(t, err, &ve, "%s: the error Publish gives", tc.name)
			}
			require.NoError(t, tx.Commit(), "%s: the transaction goes on", tc.name)
		}
		assert.Zero(t, pending(t, db), "no event written")
		var keys int
		require.NoError(t, db.QueryRow(`SELECT COUNT(*) FROM keyorder_outbox_keys`).Scan(&keys))
		assert.Zero(t, keys, "no key numbered")
	})
}

// A badInput is a message and key that Add, and Publish, refuse.
type badInput struct {
	name string
	key  string
	msg  *publisher.Message
	want error
}

func badInputs() []badInput {
	many := map[string]string{}
	for i := range publisher.MaxAttributes + 1 {
		many[fmt.Sprint("a", i)] = "v"
	}
	return []badInput{
		{"empty key", "", &publisher.Message{Data: []byte("x")}, outbox.ErrNoKey},
		{"key too long", strings.Repeat("k", 1025), &publisher.Message{Data: []byte("x")}, ordering.ErrKeyTooLong},
		{"key not UTF-8", "k\xff", &publisher.Message{Data: []byte("x")}, ordering.ErrKeyNotUTF8},
		{"nil message", "k", nil, publisher.ErrNilMessage},
		{"empty message", "k", &publisher.Message{Headers: map[string]string{ordering.Header: "k"}}, publisher.ErrEmptyMessage},
		{"stamp header", "k", &publisher.Message{Data: []byte("x"), Headers: map[string]string{ordering.StampAttribute: "p:1"}}, publisher.ErrStampAttribute},
		{"reserved attribute", "k", &publisher.Message{Data: []byte("x"), Headers: map[string]string{"googx": "v"}}, publisher.ErrReservedAttribute},
		{"too many attributes", "k", &publisher.Message{Headers: many}, publisher.ErrTooManyAttributes},
		{"too large", "k", &publisher.Message{Data: make([]byte, 10<<20)}, publisher.ErrMessageTooLarge},
	}
}

// TestCheckAgreesWithPublish checks that publisher.Check, which Add
// applies, refuses what a stamped Publisher's Publish refuses, with the
// same error, and accepts a message that Publish sends.
func TestCheckAgreesWithPublish(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	pub, err := publisher.New(e.client, e.topic, publisher.WithLogger(quiet))
	require.NoError(t, err)
	defer pub.Close(context.Background())
	ctx := harness.Context(t, testTimeout)
	for _, tc := range badInputs() {
		if tc.key == "" {
			continue // an unordered message to Publish, refused by Add alone
		}
		_, perr := pub.Publish(ctx, tc.msg, publisher.WithOrderingKey(tc.key)).Get(ctx)
		cerr := publisher.Check(tc.msg, tc.key)
		require.ErrorIs(t, perr, tc.want, tc.name)
		require.ErrorIs(t, cerr, tc.want, tc.name)
		if !errors.Is(tc.want, publisher.ErrMessageTooLarge) {
			// The size limit is the longest topic's, in Check.
			assert.Equal(t, perr.Error(), cerr.Error(), tc.name)
		}
	}
	ok := &publisher.Message{Data: []byte("x"), Headers: map[string]string{"a": "b"}}
	assert.NoError(t, publisher.Check(ok, "k"))
	_, err = pub.Publish(ctx, ok, publisher.WithOrderingKey("k")).Get(ctx)
	assert.NoError(t, err)
}

// TestNewSharesItsSettings checks that New, run by several processes at
// once, shares one producer and shard count, and that a relay needs a
// publisher without stamps.
func TestNewSharesItsSettings(t *testing.T) {
	t.Parallel()
	eachDB(t, func(t *testing.T, k dbKind) {
		t.Parallel()
		ctx := harness.Context(t, testTimeout)
		dsn := k.dsn(t)
		// Several processes' worth of New at once, each on a
		// database handle of its own.
		const n = 4
		obs := make([]*outbox.Outbox, n)
		errs := make([]error, n)
		var wg sync.WaitGroup
		for i := range n {
			db := k.openDSN(t, dsn)
			wg.Go(func() { obs[i], errs[i] = outbox.New(ctx, db, k.dialect, outbox.WithShards(8)) })
		}
		wg.Wait()
		for i := range n {
			require.NoError(t, errs[i])
			assert.Equal(t, obs[0].Producer(), obs[i].Producer())
			assert.Equal(t, 8, obs[i].Shards())
		}
		_, err := outbox.New(ctx, k.openDSN(t, dsn), k.dialect, outbox.WithShards(9))
		assert.ErrorIs(t, err, outbox.ErrInvalidConfig)
		again, err := outbox.New(ctx, k.openDSN(t, dsn), k.dialect)
		require.NoError(t, err)
		assert.Equal(t, 8, again.Shards(), "the recorded count")

		e := newEnv(t)
		stamped, err := publisher.New(e.client, e.topic, publisher.WithLogger(quiet))
		require.NoError(t, err)
		defer stamped.Close(ctx)
		_, err = outbox.NewRelay(obs[0], stamped)
		assert.ErrorIs(t, err, outbox.ErrStamped)
	})
}

// TestConcurrentWritersCommitOrder has writers on several connections add
// events of two keys at once, holding their transactions open a random
// while after Add, rolling a quarter of them back, while a relay reads.
// Each transaction also bumps an application counter of the key after
// Add, as a service's change would: its value is the transaction's place
// in the key's commit order, and the event carries it. The topic must
// hold, per key, the committed events numbered 1, 2, 3... in commit order,
// none rolled back, nothing skipped.
func TestConcurrentWritersCommitOrder(t *testing.T) {
	t.Parallel()
	eachDB(t, func(t *testing.T, k dbKind) {
		t.Parallel()
		ctx := harness.Context(t, testTimeout)
		dsn := k.dsn(t)
		main := k.openDSN(t, dsn)
		ob, err := outbox.New(ctx, main, k.dialect)
		require.NoError(t, err)
		_, err = main.ExecContext(ctx, `CREATE TABLE app (key TEXT PRIMARY KEY, v BIGINT NOT NULL)`)
		require.NoError(t, err)
		_, err = main.ExecContext(ctx, `INSERT INTO app (key, v) VALUES ('a', 0), ('b', 0)`)
		require.NoError(t, err)
		e := newEnv(t)
		r, err := outbox.NewRelay(ob, e.publisher(t), outbox.WithLogger(quiet), outbox.WithPollInterval(time.Millisecond))
		require.NoError(t, err)
		runRelay(t, r)

		const writers, each = 6, 25
		var mu sync.Mutex
		committed := map[string]int{}
		var wg sync.WaitGroup
		for w := range writers {
			db := k.openDSN(t, dsn)
			wg.Go(func() {
				for i := range each {
					key := []string{"a", "b"}[(w+i)%2]
					ok := write(t, ctx, k, db, ob, key, rand.IntN(4) != 0)
					mu.Lock()
					committed[key] += ok
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		waitFor(t, e, "the outbox to empty", func() bool { return pending(t, main) == 0 })
		v := e.view(t, ob.Producer())
		assert.Empty(t, v.disorder)
		for key, n := range committed {
			want := make([]string, n)
			for i := range want {
				want[i] = fmt.Sprint(i + 1)
			}
			assert.Equal(t, want, v.firsts[key], "key %s: its events in commit order", key)
		}
	})
}

// write runs one writer's transaction: Add, the application's change,
// a random hold, then commit or rollback. It returns 1 if it committed.
func write(t *testing.T, ctx context.Context, k dbKind, db *sql.DB, ob *outbox.Outbox, key string, commit bool) int {
	tx, err := db.BeginTx(ctx, nil)
	if !assert.NoError(t, err) {
		return 0
	}
	defer func() { _ = tx.Rollback() }()
	// The event's data is the change's place in commit order, known only
	// after Add, so Add gets a placeholder and the row is told after:
	// the test reads the number the relay stamped against the change.
	if !assert.NoError(t, ob.Add(ctx, tx, key, &publisher.Message{Data: []byte("?")})) {
		return 0
	}
	var v int64
	q := `UPDATE app SET v = v + 1 WHERE key = ? RETURNING v`
	if k.dialect == outbox.PostgreSQL {
		q = `UPDATE app SET v = v + 1 WHERE key = $1 RETURNING v`
	}
	if !assert.NoError(t, tx.QueryRowContext(ctx, q, key).Scan(&v)) {
		return 0
	}
	upd := `UPDATE keyorder_outbox SET data = ? WHERE key = ? AND seq = (SELECT MAX(seq) FROM keyorder_outbox WHERE key = ?)`
	if k.dialect == outbox.PostgreSQL {
		upd = `UPDATE keyorder_outbox SET data = $1 WHERE key = $2 AND seq = (SELECT MAX(seq) FROM keyorder_outbox WHERE key = $3)`
	}
	_, err = tx.ExecContext(ctx, upd, []byte(fmt.Sprint(v)), key, key)
	if !assert.NoError(t, err) {
		return 0
	}
	time.Sleep(time.Duration(rand.IntN(3)) * time.Millisecond) // holds the transaction open, as a service's work would
	if !commit {
		return 0
	}
	if !assert.NoError(t, tx.Commit()) {
		return 0
	}
	return 1
}

// TestAddInATxOfAnotherDB adds events in transactions of the outbox's own
// *sql.DB and of another handle on the same database, in turns, with a
// rollback between: Add prepares its statements on the outbox's handle
// (SQLite), which a transaction of another cannot run. Every event must
// be numbered in commit order and published once, in order.
func TestAddInATxOfAnotherDB(t *testing.T) {
	t.Parallel()
	eachDB(t, func(t *testing.T, k dbKind) {
		t.Parallel()
		ctx := harness.Context(t, testTimeout)
		dsn := k.dsn(t)
		db, other := k.openDSN(t, dsn), k.openDSN(t, dsn)
		ob := newOutbox(t, ctx, db, k)
		want := map[string][]string{}
		for i := range 6 {
			handle := []*sql.DB{db, other}[i%2]
			for _, key := range []string{"a", "b"} {
				d := fmt.Sprintf("%s%d", key, i)
				add(t, ctx, handle, ob, key, d, d+"'")
				want[key] = append(want[key], d, d+"'")
			}
			tx, err := handle.BeginTx(ctx, nil)
			require.NoError(t, err)
			require.NoError(t, ob.Add(ctx, tx, "a", &publisher.Message{Data: []byte("rolled back")}))
			require.NoError(t, tx.Rollback())
		}
		e := newEnv(t)
		r, err := outbox.NewRelay(ob, e.publisher(t), outbox.WithLogger(quiet))
		require.NoError(t, err)
		runRelay(t, r)
		allOnceInOrder(t, e, db, ob, r, want)
	})
}

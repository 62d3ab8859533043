package outbox_test

import (
	"context"
	"database/sql"
	"fmt"
	"log/slog"
	"path"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"

	"github.com/keyorder/keyorder/internal/harness"
	"github.com/keyorder/keyorder/ordering"
	"github.com/keyorder/keyorder/ordering/orderingtest"
	"github.com/keyorder/keyorder/publisher"
	"github.com/keyorder/keyorder/publisher/outbox"
)

// execQ runs a statement written with "?" placeholders on db.
func execQ(t *testing.T, db *sql.DB, k dbKind, q string, args ...any) {
	t.Helper()
	if k.dialect == outbox.PostgreSQL {
		for i := 1; strings.Contains(q, "?"); i++ {
			q = strings.Replace(q, "?", fmt.Sprintf("$%d", i), 1)
		}
	}
	_, err := db.Exec(q, args...)
	require.NoError(t, err, q)
}

// TestBadRowsSetAsideTheirKeysOnly writes rows no Add writes: headers
// that do not decode, a number past 2^32-1, and on SQLite text for a
// number and a number for data. Each sets aside its own key only, from
// that row on, with one Warn however often it is read again, and is
// counted; the other keys and the rows before go on.
func TestBadRowsSetAsideTheirKeysOnly(t *testing.T) {
	t.Parallel()
	eachDB(t, func(t *testing.T, k dbKind) {
		t.Parallel()
		ctx, db, e, ob := setUp(t, k)
		for _, key := range []string{"a", "b", "c", "d", "e"} {
			add(t, ctx, db, ob, key, key+"1", key+"2", key+"3")
		}
		execQ(t, db, k, `UPDATE keyorder_outbox SET headers = '{not json' WHERE key = 'a' AND seq = 2`)
		execQ(t, db, k, `INSERT INTO keyorder_outbox (key, seq, shard, data, headers, created) VALUES (?, ?, ?, ?, '', 0)`,
			"b", int64(1)<<32+1, ordering.Partition("b", ob.Shards()), []byte("b-forged"))
		bad := map[string][]string{"a": {"a1"}, "b": {"b1", "b2", "b3"}}
		if k.dialect == outbox.SQLite {
			execQ(t, db, k, `UPDATE keyorder_outbox SET seq = 'two' WHERE key = 'c' AND seq = 2`)
			bad["c"] = []string{"c1"}
			execQ(t, db, k, `UPDATE keyorder_outbox SET data = 5 WHERE key = 'e' AND seq = 2`)
			bad["e"] = []string{"e1"}
		}
		var logs harness.Buffer
		r, err := outbox.NewRelay(ob, e.publisher(t), outbox.WithLogger(slog.New(slog.NewJSONHandler(&logs, nil))))
		require.NoError(t, err)
		runRelay(t, r)
		waitFor(t, e, "the good rows published", func() bool {
			v := e.view(t, ob.Producer())
			return len(v.firsts["d"]) == 3 && len(v.firsts["a"]) == 1 && len(v.firsts["b"]) == 3
		})
		// Long enough for a few backoffs of the keys set aside.
		time.Sleep(800 * time.Millisecond) // what must not happen meanwhile: more Warns, a truncated number
		v := e.view(t, ob.Producer())
		assert.Empty(t, v.disorder)
		assert.Zero(t, v.copies, "2^32+1 is not published as 1")
		assert.Equal(t, []string{"d1", "d2", "d3"}, v.firsts["d"])
		for key, want := range bad {
			assert.Equal(t, want, v.firsts[key], key)
		}
		assert.EqualValues(t, len(bad), r.Stats().Invalid)
		assert.Equal(t, len(bad), strings.Count(logs.String(), "keyorder/outbox: bad row"), logs.String())
	})
}

// TestForgedRelayRowStarvesNoShard puts a relay's row that says it lives
// for an hour, as a dead relay whose clock ran ahead leaves: the live
// relay still takes every shard, since nobody holds them, publishes every
// key, and brings the row's expiry down to a lease from now.
func TestForgedRelayRowStarvesNoShard(t *testing.T) {
	t.Parallel()
	eachDB(t, func(t *testing.T, k dbKind) {
		t.Parallel()
		ctx, db, e, ob := setUp(t, k)
		execQ(t, db, k, `INSERT INTO keyorder_outbox_relays (id, expires) VALUES ('relay#ghost', ?)`, time.Now().Add(time.Hour).UnixNano())
		for i := range 40 {
			add(t, ctx, db, ob, fmt.Sprintf("key-%d", i), "x")
		}
		r, err := outbox.NewRelay(ob, e.publisher(t), outbox.WithLease(300*time.Millisecond), outbox.WithLogger(quiet))
		require.NoError(t, err)
		runRelay(t, r)
		waitFor(t, e, "every key published", func() bool { return pending(t, db) == 0 && r.Stats().Shards == ob.Shards() })
		var expires int64
		require.NoError(t, db.QueryRow(`SELECT expires FROM keyorder_outbox_relays WHERE id = 'relay#ghost'`).Scan(&expires))
		assert.Less(t, expires, time.Now().Add(time.Second).UnixNano(), "capped at a lease from now")
	})
}

// TestNewRefusesARecordedShardCountOverItsBound records two billion
// shards, which relays would loop over.
func TestNewRefusesARecordedShardCountOverItsBound(t *testing.T) {
	t.Parallel()
	eachDB(t, func(t *testing.T, k dbKind) {
		t.Parallel()
		ctx := harness.Context(t, testTimeout)
		db := k.open(t)
		newOutbox(t, ctx, db, k)
		execQ(t, db, k, `UPDATE keyorder_outbox_meta SET value = '2000000000' WHERE name = 'shards'`)
		_, err := outbox.New(ctx, db, k.dialect)
		require.ErrorIs(t, err, outbox.ErrInvalidConfig)
		assert.Contains(t, err.Error(), "2000000000")
	})
}

// TestRowOfNoShardIsPublished gives a row a shard out of range, which no
// relay reads: the relay gives it its key's shard, counts it, and
// publishes it.
func TestRowOfNoShardIsPublished(t *testing.T) {
	t.Parallel()
	eachDB(t, func(t *testing.T, k dbKind) {
		t.Parallel()
		ctx, db, e, ob := setUp(t, k)
		add(t, ctx, db, ob, "a", "a1")
		execQ(t, db, k, `UPDATE keyorder_outbox SET shard = 99999 WHERE key = 'a'`)
		r, err := outbox.NewRelay(ob, e.publisher(t), outbox.WithLease(300*time.Millisecond), outbox.WithLogger(quiet))
		require.NoError(t, err)
		runRelay(t, r)
		waitFor(t, e, "the row published", func() bool { return pending(t, db) == 0 })
		assert.Equal(t, []string{"a1"}, e.view(t, ob.Producer()).firsts["a"])
		assert.EqualValues(t, 1, r.Stats().Invalid)
	})
}

// TestServicesShareADatabase runs two services' outboxes, WithTable, on
// one database, each with its relay to its own topic: neither relay
// publishes, nor deletes, the other's events.
func TestServicesShareADatabase(t *testing.T) {
	t.Parallel()
	eachDB(t, func(t *testing.T, k dbKind) {
		t.Parallel()
		ctx := harness.Context(t, testTimeout)
		db := k.open(t)
		var envs []*env
		var obs []*outbox.Outbox
		for _, name := range []string{"orders_outbox", "billing_outbox"} {
			ob, err := outbox.New(ctx, db, k.dialect, outbox.WithTable(name))
			require.NoError(t, err)
			e := newEnv(t)
			startRelay(t, ob, e)
			add(t, ctx, db, ob, "k", name+"-1", name+"-2")
			envs, obs = append(envs, e), append(obs, ob)
		}
		assert.NotEqual(t, obs[0].Producer(), obs[1].Producer())
		for i, name := range []string{"orders_outbox", "billing_outbox"} {
			waitFor(t, envs[i], name+" published", func() bool { return len(envs[i].srv.Messages(envs[i].topic)) == 2 })
			assert.Equal(t, map[string][]string{"k": {name + "-1", name + "-2"}}, envs[i].view(t, obs[i].Producer()).firsts)
		}
		_, err := outbox.New(ctx, db, k.dialect, outbox.WithTable("Bad-Name"))
		assert.ErrorIs(t, err, outbox.ErrInvalidConfig)
	})
}

// TestOneTopicPerOutbox: the first relay's Run records its topic; a relay
// of the same outbox with a publisher of another topic, from another
// process's Outbox, is refused, naming both, before it publishes or
// deletes anything. A publisher made with the topic's ID is of the same
// topic. The other topic's service takes an outbox of its own (WithTable)
// in the same database, and both work.
func TestOneTopicPerOutbox(t *testing.T) {
	t.Parallel()
	eachDB(t, func(t *testing.T, k dbKind) {
		t.Parallel()
		ctx := harness.Context(t, testTimeout)
		db := k.open(t)
		ob := newOutbox(t, ctx, db, k)
		a, b := newEnv(t), newEnv(t)
		ra, err := outbox.NewRelay(ob, a.publisher(t), outbox.WithLogger(quiet))
		require.NoError(t, err)
		runRelay(t, ra)
		add(t, ctx, db, ob, "k", "a1", "a2")
		waitFor(t, a, "a's events published", func() bool { return len(a.srv.Messages(a.topic)) == 2 })

		other := newOutbox(t, ctx, db, k) // as another process opens it
		rb, err := outbox.NewRelay(other, b.publisher(t), outbox.WithLogger(quiet))
		require.NoError(t, err)
		add(t, ctx, db, ob, "k", "a3")
		runCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		err = rb.Run(runCtx)
		require.ErrorIs(t, err, outbox.ErrInvalidConfig)
		assert.Contains(t, err.Error(), "publishes to "+b.topic)
		assert.Contains(t, err.Error(), a.topic)
		assert.Empty(t, b.srv.Messages(b.topic), "the refused relay published nothing")

		byID, err := publisher.New(a.client, path.Base(a.topic), publisher.WithoutStamps(), publisher.WithLogger(quiet))
		require.NoError(t, err)
		t.Cleanup(func() { _ = byID.Close(context.Background()) })
		assert.Equal(t, a.topic, byID.Topic())
		rc, err := outbox.NewRelay(other, byID, outbox.WithLogger(quiet))
		require.NoError(t, err)
		stop := runRelay(t, rc)
		add(t, ctx, db, ob, "k", "a4")
		waitFor(t, a, "a's events published", func() bool { return len(a.srv.Messages(a.topic)) >= 4 })
		stop()
		assert.Equal(t, map[string][]string{"k": {"a1", "a2", "a3", "a4"}}, a.view(t, ob.Producer()).firsts)

		billing, err := outbox.New(ctx, db, k.dialect, outbox.WithTable("billing_outbox"))
		require.NoError(t, err)
		rb2, err := outbox.NewRelay(billing, b.publisher(t), outbox.WithLogger(quiet))
		require.NoError(t, err)
		runRelay(t, rb2)
		add(t, ctx, db, billing, "k", "b1", "b2")
		waitFor(t, b, "b's events published", func() bool { return len(b.srv.Messages(b.topic)) == 2 })
		assert.Equal(t, map[string][]string{"k": {"b1", "b2"}}, b.view(t, billing.Producer()).firsts)
	})
}

// TestNewChecksTheTablesItFinds makes a table of the outbox's name with
// other columns: New refuses it, naming it, rather than write into it.
func TestNewChecksTheTablesItFinds(t *testing.T) {
	t.Parallel()
	eachDB(t, func(t *testing.T, k dbKind) {
		t.Parallel()
		ctx := harness.Context(t, testTimeout)
		db := k.open(t)
		execQ(t, db, k, `CREATE TABLE keyorder_outbox (id BIGINT PRIMARY KEY, payload TEXT)`)
		_, err := outbox.New(ctx, db, k.dialect)
		require.ErrorIs(t, err, outbox.ErrInvalidConfig)
		assert.Contains(t, err.Error(), "keyorder_outbox has the columns (id, payload)")
	})
}

// TestNewRefusesATableWithoutRowid makes the events table by hand on
// SQLite, with the outbox's columns but WITHOUT ROWID: the relay's
// delete finds rows by their rowid, so New refuses the table, naming it,
// rather than have every delete fail.
func TestNewRefusesATableWithoutRowid(t *testing.T) {
	t.Parallel()
	k := kinds[0]
	require.Equal(t, outbox.SQLite, k.dialect)
	ctx := harness.Context(t, testTimeout)
	db := k.open(t)
	execQ(t, db, k, `CREATE TABLE keyorder_outbox (key TEXT NOT NULL, seq BIGINT NOT NULL, shard INTEGER NOT NULL,
		data BLOB, headers TEXT NOT NULL, created BIGINT NOT NULL, sent INTEGER NOT NULL DEFAULT 0,
		PRIMARY KEY (key, seq)) WITHOUT ROWID`)
	_, err := outbox.New(ctx, db, k.dialect)
	require.ErrorIs(t, err, outbox.ErrInvalidConfig)
	assert.Contains(t, err.Error(), "keyorder_outbox has no rowid")
}

// TestDialectMismatchIsNamed opens each database with the other's
// Dialect.
func TestDialectMismatchIsNamed(t *testing.T) {
	t.Parallel()
	eachDB(t, func(t *testing.T, k dbKind) {
		t.Parallel()
		ctx := harness.Context(t, testTimeout)
		other := map[outbox.Dialect]outbox.Dialect{outbox.SQLite: outbox.PostgreSQL, outbox.PostgreSQL: outbox.SQLite}[k.dialect]
		_, err := outbox.New(ctx, k.open(t), other)
		require.ErrorIs(t, err, outbox.ErrInvalidConfig)
		assert.Contains(t, err.Error(), "dialect "+other.String()+", but the database is "+k.dialect.String())
	})
}

// TestAddRefusesAKeyWithNUL: neither database holds a NUL in text, and
// PostgreSQL would abort the caller's transaction. Add refuses it before
// any statement, and the transaction goes on.
func TestAddRefusesAKeyWithNUL(t *testing.T) {
	t.Parallel()
	eachDB(t, func(t *testing.T, k dbKind) {
		t.Parallel()
		ctx := harness.Context(t, testTimeout)
		db := k.open(t)
		ob := newOutbox(t, ctx, db, k)
		tx, err := db.BeginTx(ctx, nil)
		require.NoError(t, err)
		err = ob.Add(ctx, tx, "a\x00b", &publisher.Message{Data: []byte("x")})
		var ve *publisher.ValidationError
		require.ErrorAs(t, err, &ve)
		require.ErrorIs(t, err, outbox.ErrKeyNUL)
		require.NoError(t, ob.Add(ctx, tx, "ab", &publisher.Message{Data: []byte("x")}), "the transaction is usable")
		require.NoError(t, tx.Commit())
		assert.Equal(t, 1, pending(t, db))
	})
}

// TestRunReturnsErrClosed runs a relay whose publisher is closed: Run
// returns publisher.ErrClosed rather than retry for ever.
func TestRunReturnsErrClosed(t *testing.T) {
	t.Parallel()
	eachDB(t, func(t *testing.T, k dbKind) {
		t.Parallel()
		ctx, db, e, ob := setUp(t, k)
		add(t, ctx, db, ob, "a", "a1")
		pub := e.publisher(t)
		require.NoError(t, pub.Close(ctx))
		r, err := outbox.NewRelay(ob, pub, outbox.WithLogger(quiet))
		require.NoError(t, err)
		require.ErrorIs(t, r.Run(ctx), publisher.ErrClosed)
		assert.Equal(t, 1, pending(t, db), "the event stays")
	})
}

// TestStampKeySignsEveryStamp runs a relay WithStampKey: every message
// carries a signature that verifies with the key, and not with another.
func TestStampKeySignsEveryStamp(t *testing.T) {
	t.Parallel()
	eachDB(t, func(t *testing.T, k dbKind) {
		t.Parallel()
		ctx, db, e, ob := setUp(t, k)
		key, other := []byte("0123456789abcdef0123456789abcdef"), []byte("fedcba9876543210fedcba9876543210")
		_, err := outbox.NewRelay(ob, e.publisher(t), outbox.WithStampKey([]byte("short")))
		require.ErrorIs(t, err, outbox.ErrInvalidConfig)
		r, err := outbox.NewRelay(ob, e.publisher(t), outbox.WithStampKey(key), outbox.WithLogger(quiet))
		require.NoError(t, err)
		runRelay(t, r)
		add(t, ctx, db, ob, "a", "a1", "a2")
		add(t, ctx, db, ob, "b", "b1")
		waitFor(t, e, "3 messages", func() bool { return len(e.srv.Messages(e.topic)) == 3 })
		good, err := ordering.NewStampKeys(key)
		require.NoError(t, err)
		bad, err := ordering.NewStampKeys(other)
		require.NoError(t, err)
		for _, m := range e.srv.Messages(e.topic) {
			st, err := ordering.ParseStamp(m.Attributes)
			require.NoError(t, err)
			assert.NoError(t, good.Verify(m.Attributes, m.OrderingKey, st, m.Data))
			assert.ErrorIs(t, bad.Verify(m.Attributes, m.OrderingKey, st, m.Data), ordering.ErrUnverifiedStamp)
		}
	})
}

// TestRelayWakesOnCommit polls once a minute: on SQLite the relay is
// woken by Add of its own Outbox, on PostgreSQL by the commits of another
// process's, through a Listener.
func TestRelayWakesOnCommit(t *testing.T) {
	t.Parallel()
	eachDB(t, func(t *testing.T, k dbKind) {
		t.Parallel()
		ctx := harness.Context(t, testTimeout)
		dsn := k.dsn(t)
		var reads atomic.Int64
		db := openHooked(t, k, dsn, hooks{query: func(q string) error {
			if strings.HasPrefix(q, pageRead) {
				reads.Add(1)
			}
			return nil
		}})
		e := newEnv(t)
		ob := newOutbox(t, ctx, db, k)
		writer := ob
		if k.dialect == outbox.PostgreSQL {
			writer = newOutbox(t, ctx, k.openDSN(t, dsn), k) // as another process's
		}
		r, err := outbox.NewRelay(ob, e.publisher(t), relayOptions(k, dsn, outbox.WithPollInterval(time.Minute))...)
		require.NoError(t, err)
		runRelay(t, r)
		// Past the first poll, which Run makes at once: the next is a
		// minute away.
		waitFor(t, e, "the shards and the first poll", func() bool {
			return r.Stats().Shards == ob.Shards() && reads.Load() > 0
		})
		for i := range 3 {
			start := time.Now()
			add(t, ctx, db, writer, "a", fmt.Sprint(i))
			waitFor(t, e, "the event", func() bool { return len(e.srv.Messages(e.topic)) == i+1 })
			assert.Less(t, time.Since(start), 5*time.Second, "woken, not polled")
		}
	})
}

// TestNextEventsGoBehindThoseInFlight holds a key's first publish at the
// server: events of the key committed meanwhile are read, marked and
// handed to the publisher behind it at once, not after its result, a
// delete and another read. Once released, every event reaches the topic
// in order.
func TestNextEventsGoBehindThoseInFlight(t *testing.T) {
	t.Parallel()
	eachDB(t, func(t *testing.T, k dbKind) {
		t.Parallel()
		ctx, db, e, ob := setUp(t, k)
		hold := e.srv.HoldPublish(orderingtest.Key("a"))
		r := startRelay(t, ob, e)
		add(t, ctx, db, ob, "a", "a1", "a2")
		require.NoError(t, hold.Wait(ctx, 1))
		add(t, ctx, db, ob, "a", "a3", "a4")
		waitFor(t, e, "a3 and a4 sent behind a1 and a2", func() bool {
			var n int
			require.NoError(t, db.QueryRow(`SELECT COUNT(*) FROM keyorder_outbox e JOIN keyorder_outbox_sent s ON s.key = e.key WHERE e.key = 'a' AND e.seq <= s.upto`).Scan(&n))
			return n == 4
		})
		assert.Zero(t, r.Stats().Published, "a1 is still held")
		hold.Remove()
		waitFor(t, e, "the outbox to empty", func() bool { return pending(t, db) == 0 })
		assert.Equal(t, map[string][]string{"a": {"a1", "a2", "a3", "a4"}}, e.view(t, ob.Producer()).firsts)
		assert.Zero(t, r.Stats().Resent)
	})
}

// TestFailedRunBelowABadRow fails the publish of a key's run that stops
// at a bad row. The failed events are sent again once the key's backoff
// is over, while the bad row still holds the key aside: they are below it
// and were never taken. Once the row is mended, it follows them, in
// order. (Before, the relay took the number after the failed run for the
// key's next, and skipped the failed events while the row was bad; sent
// after it once mended, they came out of order.)
func TestFailedRunBelowABadRow(t *testing.T) {
	t.Parallel()
	eachDB(t, func(t *testing.T, k dbKind) {
		t.Parallel()
		ctx, db, e, ob := setUp(t, k)
		add(t, ctx, db, ob, "k", "k1", "k2", "k3", "k4")
		execQ(t, db, k, `UPDATE keyorder_outbox SET headers = '{not json' WHERE key = 'k' AND seq = 4`)
		failed := e.srv.FailPublish(orderingtest.Key("k"), codes.PermissionDenied, 1)
		r, err := outbox.NewRelay(ob, e.publisher(t), outbox.WithLogger(quiet))
		require.NoError(t, err)
		runRelay(t, r)
		waitFor(t, e, "k1 to k3 on the topic, the bad row still there", func() bool {
			return len(e.view(t, ob.Producer()).firsts["k"]) == 3
		})
		assert.Equal(t, 1, failed.Hits())
		execQ(t, db, k, `UPDATE keyorder_outbox SET headers = '' WHERE key = 'k' AND seq = 4`)
		waitFor(t, e, "the outbox to empty", func() bool { return pending(t, db) == 0 })
		v := e.view(t, ob.Producer())
		assert.Empty(t, v.disorder)
		assert.Equal(t, []string{"k1", "k2", "k3", "k4"}, v.firsts["k"])
	})
}

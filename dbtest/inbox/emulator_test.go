package inbox_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"testing"
	"time"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/keyorder/keyorder/ordering/orderingtest"
	"github.com/keyorder/keyorder/subscriber"
	"github.com/keyorder/keyorder/subscriber/inbox"
)

// On a server that redelivers out of order (Google's emulator, the fake
// WithEmulatorRedelivery), a lower number that comes later may never have
// run: silence before a producer's first number seen is never its start.

// TestHandOverOnTheEmulator: in each of 12 rounds, a replica receives a
// key's 30 events and stops before it applies any; the next replica gets
// them back in nack order, through the inbox: all 30 are applied, once
// each, in order, every round, at least once and exactly once alike.
func TestHandOverOnTheEmulator(t *testing.T) {
	eachDatabase(t, func(t *testing.T, db database) {
		for _, tc := range []struct {
			name string
			opts []subscriber.Option
		}{
			{"at least once", nil},
			{"exactly once", []subscriber.Option{subscriber.WithExactlyOnceDelivery()}},
		} {
			t.Run(tc.name, func(t *testing.T) { handOverRounds(t, db, tc.opts...) })
		}
	})
}

// handOverRounds is a round of TestHandOverOnTheEmulator on db, 12 times.
func handOverRounds(t *testing.T, db database, extra ...subscriber.Option) {
	{
		ctx := timeout(t, 3*testTimeout)
		// A lease the stopped Receive's nacks did not end runs out within
		// a second, not the subscription's minute.
		srv := orderingtest.Start(t, orderingtest.WithEmulatorRedelivery(), orderingtest.WithAckDeadline(time.Second))
		client := connect(t, ctx, srv)
		topic, subID := names()
		opts := append([]subscriber.Option{subscriber.WithUnorderedRedelivery(), subscriber.WithDrainTimeout(100 * time.Millisecond), fast, quiet}, extra...)
		first, err := subscriber.CreateWithTopic(ctx, client, topic, subID, opts...)
		require.NoError(t, err)
		second, err := subscriber.Open(ctx, client, subID, opts...)
		require.NoError(t, err)
		one, _ := db.open(t)
		ib := newInbox(t, one, db.dialect)
		const rounds, n = 12, 30
		var keys []string
		for r := range rounds {
			key := fmt.Sprintf("k%d", r)
			keys = append(keys, key)
			msgs := make([]stamped, n)
			for i := range msgs {
				msgs[i] = stamped{key: key, n: uint32(i + 1)}
			}
			handOver(t, srv, first, func() { publishStamped(t, client, topic, msgs...) }, key, n)
			stop := run(t, second, ib.Handler(record(db.dialect)))
			err := srv.WaitFor(timeout(t, testTimeout), func() bool { return count(t, one, `SELECT COUNT(*) FROM effects`) >= (r+1)*n })
			require.NoError(t, err, "round %d: %d of %d applied; inbox %+v; Receive %+v; server %+v",
				r, count(t, one, `SELECT COUNT(*) FROM effects`), (r+1)*n, ib.Stats(), second.Stats(), srv.Stats(second.Name()))
			stop()
			closed(t, srv, second)
		}
		// Every number applied once proves that no copy the inbox acked
		// was a number it had not applied (exactly once, a lease that ran
		// out after the commit brings back a true copy).
		requireOnceInOrder(t, one, keys, n)
		assert.Zero(t, ib.Stats().Gaps, "nothing owed: every number came")
		t.Logf("inbox %+v; second Receive's reruns %d", ib.Stats(), second.Stats().Rerun)
	}
}

// handOver runs a Receive of s whose handler applies nothing, publishes,
// waits until key's n messages have reached it, and stops it: they are
// nacked, and come back in nack order. A copy of an earlier round's key
// that the service sends it meanwhile (exactly once: a lease that ran
// out after the commit) runs beside them, and goes back too.
func handOver(t *testing.T, srv *orderingtest.Server, s *subscriber.Subscription, publish func(), key string, n int) {
	t.Helper()
	stop := run(t, s, func(ctx context.Context, _ *subscriber.Delivery) error {
		<-ctx.Done()
		return ctx.Err()
	})
	publish()
	require.NoError(t, srv.WaitFor(timeout(t, testTimeout), func() bool {
		for _, k := range s.Stats().TopBacklog {
			if k.Key == key {
				return k.Running && k.Queued == n-1
			}
		}
		return false
	}), "every message of %s reached the first Receive: %+v", key, s.Stats())
	stop()
	closed(t, srv, s)
}

// closed waits until the server has seen the streams of s's stopped
// Receive close, so that it sends nothing more to them (a message sent to
// a stream nobody reads would come back only when its lease ran out), and
// holds no lease: every message is acked, or nacked and to come back.
func closed(t *testing.T, srv *orderingtest.Server, s *subscriber.Subscription) {
	t.Helper()
	require.NoError(t, srv.WaitFor(timeout(t, testTimeout), func() bool {
		st := srv.Stats(s.Name())
		return st.Streams == 0 && st.Outstanding == 0
	}))
}

// TestRedrivenFirstOnTheEmulator: a key's event 1 fails until the
// dead-letter policy forwards it; 2 and 3 wait for it, since a sequence
// starts at 1; 1, redriven from the dead-letter topic, is applied, and all
// three once each: in order, or 1 owed and applied late.
func TestRedrivenFirstOnTheEmulator(t *testing.T) {
	eachDatabase(t, func(t *testing.T, db database) {
		ctx := timeout(t, testTimeout)
		srv := orderingtest.Start(t, orderingtest.WithEmulatorRedelivery())
		client := connect(t, ctx, srv)
		topic, subID := names()
		dead := topic + "-dead"
		_, err := client.TopicAdminClient.CreateTopic(ctx, &pubsubpb.Topic{Name: "projects/inbox-test/topics/" + dead})
		require.NoError(t, err)
		sub, err := subscriber.CreateWithTopic(ctx, client, topic, subID, fast, quiet,
			subscriber.WithUnorderedRedelivery(), subscriber.WithMaxAttempts(2),
			subscriber.WithDeadLetterPolicy(dead, 5), subscriber.WithRetryPolicy(10*time.Millisecond, 20*time.Millisecond))
		require.NoError(t, err)
		one, _ := db.open(t)
		ib := newInbox(t, one, db.dialect, inbox.WithGapWait(2*time.Second))
		boom := errors.New("event 1 fails until redriven")
		h := ib.Handler(func(ctx context.Context, tx *sql.Tx, d *subscriber.Delivery) error {
			if d.Seq == 1 && d.Headers[subscriber.DeadLetterSourceAttribute] == "" {
				return boom
			}
			return record(db.dialect)(ctx, tx, d)
		})
		stop := run(t, sub, h)
		publishStamped(t, client, topic, stamped{key: "k", n: 1}, stamped{key: "k", n: 2}, stamped{key: "k", n: 3})
		require.NoError(t, srv.WaitFor(ctx, func() bool { return srv.Stats(sub.Name()).DeadLettered == 1 }), "1 dead-lettered")
		publishStamped(t, client, topic, stamped{key: "k", n: 1, redriven: true})
		waitApplied(t, srv, one, 3)
		require.NoError(t, srv.WaitFor(ctx, func() bool { return srv.Stats(sub.Name()).Outstanding == 0 }))
		stop()
		times, order := applied(t, one)
		assert.Equal(t, map[string]int{"k/0.1": 1, "k/0.2": 1, "k/0.3": 1}, times)
		if ib.Stats().LateApplied == 0 {
			assert.Equal(t, []uint64{1, 2, 3}, order["k"], "1 came within the wait, and went first")
		} else {
			assert.Equal(t, []uint64{2, 3, 1}, order["k"], "1 owed, then applied")
		}
		assert.Zero(t, ib.Stats().Copies, "nothing taken for a copy")
		t.Logf("order %v; inbox %+v", order["k"], ib.Stats())
	})
}

package inbox_test

import (
	"context"
	"database/sql"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"cloud.google.com/go/pubsub/v2"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/keyorder/keyorder/ordering"
	"github.com/keyorder/keyorder/ordering/orderingtest"
	"github.com/keyorder/keyorder/subscriber"
	"github.com/keyorder/keyorder/subscriber/inbox"
)

// The tests on the faithful fake: the inbox's handler behind each door of
// the one call path, with the fake's faults.

const testTimeout = time.Minute

var fast = subscriber.WithBackoff(time.Millisecond, 5*time.Millisecond)

// quiet keeps the subscribers' logs of copies out of the test's output.
var quiet = subscriber.WithLogger(slog.New(slog.DiscardHandler))

var seq atomic.Int64

// names returns a topic and a subscription ID new to the test binary.
func names() (topic, sub string) {
	n := seq.Add(1)
	return fmt.Sprintf("inbox-topic-%d", n), fmt.Sprintf("inbox-sub-%d", n)
}

// stamped is one message to publish with a stamp set by hand: a copy is
// the same stamp published twice, as the service stores a retried
// publish, or as an outbox relay re-sends.
type stamped struct {
	key  string
	n    uint32
	copy bool
	// redriven marks the message as the service marks one it forwards
	// to a dead-letter topic, as a redrive republishes it.
	redriven bool
}

// publishStamped publishes msgs in order, with message ordering, stamped
// as producer p's number n of epoch 0, and waits for them.
func publishStamped(t *testing.T, client *pubsub.Client, topic string, msgs ...stamped) {
	t.Helper()
	ctx := timeout(t, testTimeout)
	p := client.Publisher(topic)
	p.EnableMessageOrdering = true
	defer p.Stop()
	var results []*pubsub.PublishResult
	for _, m := range msgs {
		attrs := map[string]string{}
		ordering.Stamp{Producer: "p", Seq: ordering.MakeSeq(0, m.n)}.Put(attrs)
		if m.redriven {
			attrs[subscriber.DeadLetterSourceAttribute] = "projects/inbox-test/subscriptions/elsewhere"
		}
		data := fmt.Sprintf("%s/%d", m.key, m.n)
		if m.copy {
			data += "-copy"
		}
		results = append(results, p.Publish(ctx, &pubsub.Message{Data: []byte(data), OrderingKey: m.key, Attributes: attrs}))
	}
	for _, r := range results {
		_, err := r.Get(ctx)
		require.NoError(t, err)
	}
}

// run is a Receive of s with h, stopped by the returned function, which
// waits for it.
func run(t *testing.T, s *subscriber.Subscription, h subscriber.Handler) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Receive(ctx, h) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			select {
			case err := <-done:
				assert.NoError(t, err)
			case <-time.After(testTimeout):
				t.Error("Receive did not return")
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

// counted wraps h to count its calls.
func counted(calls *atomic.Int64, h subscriber.Handler) subscriber.Handler {
	return func(ctx context.Context, d *subscriber.Delivery) error {
		calls.Add(1)
		return h(ctx, d)
	}
}

// waitApplied waits until effects holds n rows.
func waitApplied(t *testing.T, srv *orderingtest.Server, db *sql.DB, n int) {
	t.Helper()
	ctx := timeout(t, testTimeout)
	var got int
	err := srv.WaitFor(ctx, func() bool {
		got = count(t, db, `SELECT COUNT(*) FROM effects`)
		return got >= n
	})
	require.NoError(t, err, "%d of %d applied", got, n)
}

// requireOnceInOrder checks that effects holds numbers 1 to n of each key
// once each, in order.
func requireOnceInOrder(t *testing.T, db *sql.DB, keys []string, n int) {
	t.Helper()
	times, order := applied(t, db)
	for k, c := range times {
		assert.Equal(t, 1, c, "%s applied %d times", k, c)
	}
	for _, key := range keys {
		want := make([]uint64, n)
		for i := range want {
			want[i] = uint64(i + 1)
		}
		assert.Equal(t, want, order[key], "key %s: each number once, in order", key)
	}
}

// messages is 1..n of each key, with a copy of every fifth number right
// after it.
func messages(keys []string, from, to uint32) []stamped {
	var out []stamped
	for n := from; n <= to; n++ {
		for _, k := range keys {
			out = append(out, stamped{key: k, n: n})
			if n%5 == 0 {
				out = append(out, stamped{key: k, n: n, copy: true})
			}
		}
	}
	return out
}

// TestReplicasOnTheFake: two Receives of one subscription share the
// inbox, one of them killed in the middle with acks lost, so that what it
// applied comes back to Receives that never saw it, while copies are
// published and delivered twice: every number applied once, in order.
func TestReplicasOnTheFake(t *testing.T) {
	eachDatabase(t, func(t *testing.T, db database) {
		ctx := timeout(t, testTimeout)
		srv := orderingtest.Start(t, orderingtest.WithAckDeadline(300*time.Millisecond))
		clientA := connect(t, ctx, srv)
		clientB := connect(t, ctx, srv)
		topic, subID := names()
		subA, err := subscriber.CreateWithTopic(ctx, clientA, topic, subID, fast, quiet)
		require.NoError(t, err)
		subB, err := subscriber.Open(ctx, clientB, subID, fast, quiet)
		require.NoError(t, err)
		one, two := db.open(t)
		inA, inB := newInbox(t, one, db.dialect), newInbox(t, two, db.dialect)
		keys := []string{"a", "b", "c", "d"}
		const n = 30

		// A alone applies the first third, and loses acks.
		stopA := run(t, subA, inA.Handler(record(db.dialect)))
		publishStamped(t, clientA, subA.Topic(), messages(keys, 1, 10)...)
		waitApplied(t, srv, one, 4*10)
		lost := srv.DropAcks(orderingtest.AnyMessage, 0)
		srv.DuplicateDeliveries(orderingtest.AnyMessage, 6)
		publishStamped(t, clientA, subA.Topic(), messages(keys, 11, 15)...)
		require.NoError(t, lost.Wait(ctx, 8))
		stopA()
		lost.Remove()

		// A again, fresh, and B share the rest.
		stopA = run(t, subA, inA.Handler(record(db.dialect)))
		stopB := run(t, subB, inB.Handler(record(db.dialect)))
		publishStamped(t, clientA, subA.Topic(), messages(keys, 16, n)...)
		waitApplied(t, srv, one, len(keys)*n)
		require.NoError(t, srv.WaitFor(ctx, func() bool { return srv.Stats(subA.Name()).Outstanding == 0 }))
		stopA()
		stopB()
		requireOnceInOrder(t, one, keys, n)
		copies := inA.Stats().Copies + inB.Stats().Copies
		assert.Positive(t, copies, "what the first Receive applied came back, and was acked as a copy")
		t.Logf("inbox copies %d; in-memory duplicates %d+%d", copies, subA.Stats().Duplicates, subB.Stats().Duplicates)
	})
}

// TestExactlyOnceOnTheFake: on an exactly-once subscription, a message
// whose ack fails for good is owed by the subscriber's window and called
// again (S12); the inbox acks it as a copy, so it is applied once.
func TestExactlyOnceOnTheFake(t *testing.T) {
	eachDatabase(t, func(t *testing.T, db database) {
		ctx := timeout(t, testTimeout)
		srv := orderingtest.Start(t, orderingtest.WithAckDeadline(300*time.Millisecond))
		client := connect(t, ctx, srv)
		topic, subID := names()
		sub, err := subscriber.CreateWithTopic(ctx, client, topic, subID, fast, quiet, subscriber.WithExactlyOnceDelivery())
		require.NoError(t, err)
		one, _ := db.open(t)
		ib := newInbox(t, one, db.dialect)
		refused := srv.FailAcks(orderingtest.AnyMessage, orderingtest.PermanentAckFailure, 5)
		var calls atomic.Int64
		stop := run(t, sub, counted(&calls, ib.Handler(record(db.dialect))))
		keys := []string{"a", "b"}
		publishStamped(t, client, sub.Topic(), messages(keys, 1, 20)...)
		waitApplied(t, srv, one, 40)
		require.NoError(t, refused.Wait(ctx, 5))
		require.NoError(t, srv.WaitFor(ctx, func() bool {
			return ib.Stats().Copies >= 1 && srv.Stats(sub.Name()).Outstanding == 0
		}), "a message whose ack failed came back to the handler, and was a copy")
		stop()
		requireOnceInOrder(t, one, keys, 20)
		assert.Greater(t, calls.Load(), int64(40), "the handler was called again for messages it had applied")
	})
}

// TestOwedRedrivenOnTheFake: a number the inbox recorded as owed, redriven
// later from a dead-letter topic to a replica that never saw its key, is
// applied once, not taken for a copy; a copy of it after that is acked
// unapplied.
func TestOwedRedrivenOnTheFake(t *testing.T) {
	eachDatabase(t, func(t *testing.T, db database) {
		ctx := timeout(t, testTimeout)
		srv := orderingtest.Start(t)
		client := connect(t, ctx, srv)
		topic, subID := names()
		subA, err := subscriber.CreateWithTopic(ctx, client, topic, subID, fast, quiet)
		require.NoError(t, err)
		one, two := db.open(t)
		inA := newInbox(t, one, db.dialect, inbox.WithGapWait(0))
		stopA := run(t, subA, inA.Handler(record(db.dialect)))
		publishStamped(t, client, subA.Topic(), stamped{key: "k", n: 1}, stamped{key: "k", n: 3})
		waitApplied(t, srv, one, 2)
		require.NoError(t, srv.WaitFor(ctx, func() bool { return inA.Stats().Gaps == 1 }))
		stopA()

		subB, err := subscriber.Open(ctx, client, subID, fast, quiet)
		require.NoError(t, err)
		inB := newInbox(t, two, db.dialect, inbox.WithGapWait(0))
		stopB := run(t, subB, inB.Handler(record(db.dialect)))
		publishStamped(t, client, subA.Topic(), stamped{key: "k", n: 4})
		// 4 is applied before 2 comes: a 2 that came while 4 waited in the
		// lane would go before it.
		waitApplied(t, srv, one, 3)
		publishStamped(t, client, subA.Topic(), stamped{key: "k", n: 2, redriven: true}, stamped{key: "k", n: 2, copy: true, redriven: true})
		waitApplied(t, srv, one, 4)
		require.NoError(t, srv.WaitFor(ctx, func() bool {
			return srv.Stats(subA.Name()).Outstanding == 0 && inB.Stats().Copies+subB.Stats().Duplicates >= 1
		}))
		stopB()
		times, order := applied(t, one)
		assert.Len(t, times, 4)
		for k, n := range times {
			assert.Equal(t, 1, n, k)
		}
		assert.Equal(t, []uint64{1, 3, 4, 2}, order["k"])
		assert.Equal(t, int64(1), inB.Stats().LateApplied)
	})
}

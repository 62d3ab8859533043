package inbox_test

import (
	"context"
	"database/sql"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/keyorder/keyorder/ordering/orderingtest"
	"github.com/keyorder/keyorder/subscriber"
	"github.com/keyorder/keyorder/subscriber/inbox"
)

const pusher = "pusher@inbox-test.iam.gserviceaccount.com"

// swappable serves whichever http.Handler it holds: the push endpoint of
// one replica, then of another behind the same URL.
type swappable struct{ h atomic.Pointer[http.Handler] }

func (s *swappable) ServeHTTP(w http.ResponseWriter, r *http.Request) { (*s.h.Load()).ServeHTTP(w, r) }
func (s *swappable) set(h http.Handler)                               { s.h.Store(&h) }

// TestPushDoor: behind a push endpoint, a message after a gap waits,
// within its request, then is applied, and the gap reported; the missing
// number applies late, once; a replica that takes the endpoint over with
// no memory acks the copies it is pushed.
func TestPushDoor(t *testing.T) {
	eachDatabase(t, func(t *testing.T, db database) {
		ctx := timeout(t, testTimeout)
		srv := orderingtest.Start(t)
		client := connect(t, ctx, srv)
		validator, err := srv.TokenValidator(ctx)
		require.NoError(t, err)
		var endpoint swappable
		web := httptest.NewServer(&endpoint)
		t.Cleanup(web.Close)
		topic, subID := names()
		opts := []subscriber.Option{
			subscriber.WithPush(web.URL), subscriber.WithPushAuth(pusher, ""), subscriber.WithTokenValidator(validator),
			subscriber.WithRetryPolicy(10*time.Millisecond, 50*time.Millisecond), fast, quiet,
		}
		first, err := subscriber.CreateWithTopic(ctx, client, topic, subID, opts...)
		require.NoError(t, err)
		one, two := db.open(t)
		var seen gaps
		ib := newInbox(t, one, db.dialect, inbox.WithGapWait(200*time.Millisecond), inbox.WithGapHandler(seen.handler))
		endpoint.set(first.PushHandler(ib.Handler(record(db.dialect))))

		publishStamped(t, client, first.Topic(), stamped{key: "k", n: 1}, stamped{key: "k", n: 3})
		waitApplied(t, srv, one, 2)
		require.NoError(t, srv.WaitFor(ctx, func() bool { return len(seen.all()) == 1 }), "the gap is reported once committed")
		assert.Equal(t, uint64(2), seen.all()[0].From)
		assert.Positive(t, ib.Stats().GapWaits)
		publishStamped(t, client, first.Topic(), stamped{key: "k", n: 2})
		waitApplied(t, srv, one, 3)
		require.NoError(t, first.Close(ctx))

		// Another replica, with no memory of them, is pushed copies.
		second, err := subscriber.Open(ctx, client, subID, opts...)
		require.NoError(t, err)
		other := newInbox(t, two, db.dialect)
		endpoint.set(second.PushHandler(other.Handler(record(db.dialect))))
		publishStamped(t, client, first.Topic(), stamped{key: "k", n: 3, copy: true}, stamped{key: "k", n: 2, copy: true}, stamped{key: "k", n: 4})
		waitApplied(t, srv, one, 4)
		require.NoError(t, srv.WaitFor(ctx, func() bool { return other.Stats().Copies == 1 }), "the copy of 3, the first the replica sees, is the inbox's to find")
		require.NoError(t, second.Close(ctx))
		times, order := applied(t, one)
		assert.Len(t, times, 4)
		for k, n := range times {
			assert.Equal(t, 1, n, k)
		}
		assert.Equal(t, []uint64{1, 3, 2, 4}, order["k"])
		assert.Equal(t, int64(1), ib.Stats().LateApplied)
	})
}

// TestReleaseDoor: a message whose apply fails for good parks its key;
// another replica, with no memory of the key, releases it through the
// inbox: every number applied once, in order, the parked copy of a number
// applied before the park, parked after the key's last, skipped.
func TestReleaseDoor(t *testing.T) {
	eachDatabase(t, func(t *testing.T, db database) {
		ctx := timeout(t, testTimeout)
		srv := orderingtest.Start(t, orderingtest.WithAckDeadline(time.Second))
		client := connect(t, ctx, srv)
		topic, subID := names()
		opts := []subscriber.Option{subscriber.WithParking("parked-" + topic), subscriber.WithParkingWait(100 * time.Millisecond), fast, quiet, subscriber.WithMaxAttempts(2)}
		subA, err := subscriber.CreateWithTopic(ctx, client, topic, subID, opts...)
		require.NoError(t, err)
		one, two := db.open(t)
		poison := errors.New("poison")
		var fixed atomic.Bool
		failing3 := func(apply inbox.ApplyFunc) inbox.ApplyFunc {
			return func(ctx context.Context, tx *sql.Tx, d *subscriber.Delivery) error {
				if d.Seq == 3 && !fixed.Load() {
					return poison
				}
				return apply(ctx, tx, d)
			}
		}
		inA := newInbox(t, one, db.dialect)
		stopA := run(t, subA, inA.Handler(failing3(record(db.dialect))))
		parkedA := func(n int) func() bool {
			return func() bool {
				parked, err := subA.Parked(ctx)
				return err == nil && len(parked) == 1 && parked[0].Messages == n
			}
		}
		publishStamped(t, client, subA.Topic(), stamped{key: "k", n: 1}, stamped{key: "k", n: 2}, stamped{key: "k", n: 3},
			stamped{key: "k", n: 4}, stamped{key: "k", n: 5})
		require.NoError(t, srv.WaitFor(ctx, parkedA(3)), "3, 4 and 5 parked")
		// A copy of 2 that came while 3 waited in the lane would run
		// before it, as a copy; one that comes once the key is parked is
		// parked behind 5.
		publishStamped(t, client, subA.Topic(), stamped{key: "k", n: 2, copy: true})
		require.NoError(t, srv.WaitFor(ctx, parkedA(4)), "the copy of 2 parked behind them")
		stopA()

		fixed.Store(true)
		subB, err := subscriber.Open(ctx, client, subID, opts...)
		require.NoError(t, err)
		inB := newInbox(t, two, db.dialect)
		stopB := run(t, subB, inB.Handler(failing3(record(db.dialect))))
		require.NoError(t, subB.Release(ctx, "k"))
		stopB()
		times, order := applied(t, one)
		assert.Len(t, times, 5)
		for k, n := range times {
			assert.Equal(t, 1, n, k)
		}
		assert.Equal(t, []uint64{1, 2, 3, 4, 5}, order["k"])
		assert.Equal(t, int64(1), inB.Stats().Copies+subB.Stats().Duplicates, "the parked copy of 2, after 5 in the release, is skipped")
		assert.Equal(t, int64(3), inB.Stats().Applied)
	})
}

package inbox_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/keyorder/keyorder/subscriber"
	"github.com/keyorder/keyorder/subscriber/inbox"
)

// One gap, one clock: a gap's wait is recorded once, by whichever replica
// first finds it, and every message waiting on it shares it.

// untilApplied calls h with d until it returns nil, as a door retries a
// message whose call answered RetryAfter: after the delay asked, or after
// every, whichever is sooner (a push subscription's backoff does not wait
// for the delay a handler asks).
func untilApplied(ctx context.Context, h subscriber.Handler, d *subscriber.Delivery, every time.Duration) error {
	for {
		err := h(ctx, d)
		var ra *subscriber.RetryAfterError
		if err == nil || !errors.As(err, &ra) {
			return err
		}
		select {
		case <-time.After(min(ra.Delay, every)):
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// TestTwoWaitersOneClock: 3 and 4 wait for 2 on two replicas, each
// retried as its door retries it; neither restarts the other's wait, so
// both are applied once WithGapWait has passed since the first found the
// gap, 2 owed.
func TestTwoWaitersOneClock(t *testing.T) {
	eachDatabase(t, func(t *testing.T, db database) {
		ctx := timeout(t, 20*time.Second)
		one, two := db.open(t)
		var seen gaps
		a := newInbox(t, one, db.dialect, inbox.WithGapWait(time.Second), inbox.WithGapHandler(seen.handler))
		b := newInbox(t, two, db.dialect, inbox.WithGapWait(time.Second), inbox.WithGapHandler(seen.handler))
		ha, hb := a.Handler(record(db.dialect)), b.Handler(record(db.dialect))
		require.NoError(t, ha(ctx, delivery("k", "p", 1)))

		began := time.Now()
		var wg sync.WaitGroup
		errs := make([]error, 2)
		for i, h := range []subscriber.Handler{ha, hb} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				errs[i] = untilApplied(ctx, h, delivery("k", "p", uint32(3+i)), 300*time.Millisecond)
			}()
		}
		wg.Wait()
		require.NoError(t, errs[0])
		require.NoError(t, errs[1])
		took := time.Since(began)
		assert.GreaterOrEqual(t, took, time.Second, "the gap was waited for")
		assert.Less(t, took, 4*time.Second, "one wait, shared")
		times, _ := applied(t, one)
		assert.Equal(t, map[string]int{"k/0.1": 1, "k/0.3": 1, "k/0.4": 1}, times)
		require.NotEmpty(t, seen.all())
		assert.Equal(t, uint64(2), seen.all()[0].From)
	})
}

// TestUnorderedWaitersEnd: a key's messages come in any order, each
// retried every 50 ms as an unordered push subscription retries them, and
// one number never comes: every other message is applied once, within a
// few of WithGapWait, however often the waiting ones are called.
func TestUnorderedWaitersEnd(t *testing.T) {
	eachDatabase(t, func(t *testing.T, db database) {
		ctx := timeout(t, 30*time.Second)
		one, two := db.open(t)
		const wait = time.Second
		handlers := []subscriber.Handler{
			newInbox(t, one, db.dialect, inbox.WithGapWait(wait)).Handler(record(db.dialect)),
			newInbox(t, two, db.dialect, inbox.WithGapWait(wait)).Handler(record(db.dialect)),
		}
		const n, lost = 20, 10
		numbers := rand.Perm(n)
		began := time.Now()
		var wg sync.WaitGroup
		errs := make(chan error, n)
		for i, k := range numbers {
			if k+1 == lost {
				continue
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				errs <- untilApplied(ctx, handlers[i%2], delivery("k", "p", uint32(k+1)), 50*time.Millisecond)
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			require.NoError(t, err)
		}
		t.Logf("all applied in %v", time.Since(began))
		assert.Less(t, time.Since(began), 6*wait)
		times, _ := applied(t, one)
		assert.Len(t, times, n-1)
		for k, c := range times {
			assert.Equal(t, 1, c, k)
		}
	})
}

package inbox_test

import (
	"context"
	"database/sql"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/keyorder/keyorder/ordering"
	"github.com/keyorder/keyorder/subscriber"
	"github.com/keyorder/keyorder/subscriber/inbox"
)

// gaps collects what a WithGapHandler is told.
type gaps struct {
	mu  sync.Mutex
	got []subscriber.Gap
}

func (g *gaps) handler(gp subscriber.Gap) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.got = append(g.got, gp)
}

func (g *gaps) all() []subscriber.Gap {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]subscriber.Gap(nil), g.got...)
}

// TestGapOwedAppliesLateOnce: with no wait, the message after a gap is
// applied at once and the missing numbers are owed: each applies once
// when it comes, in any order, however the run of them is split, and is
// then a copy.
func TestGapOwedAppliesLateOnce(t *testing.T) {
	eachDatabase(t, func(t *testing.T, db database) {
		ctx := timeout(t, 30*time.Second)
		one, two := db.open(t)
		var seen gaps
		ib := newInbox(t, one, db.dialect, inbox.WithGapWait(0), inbox.WithGapHandler(seen.handler))
		other := newInbox(t, two, db.dialect, inbox.WithGapWait(0))
		h, h2 := ib.Handler(record(db.dialect)), other.Handler(record(db.dialect))
		require.NoError(t, h(ctx, delivery("k", "p", 1)))
		require.NoError(t, h(ctx, delivery("k", "p", 7)))
		require.Equal(t, []subscriber.Gap{{Key: "k", Producer: "p", From: 2, To: 6, MessageID: "k-p-7", Seq: 7}}, seen.all())

		for _, n := range []uint32{4, 2, 6, 3, 5} {
			require.NoError(t, h2(ctx, delivery("k", "p", n)), "owed %d, on another replica", n)
		}
		for n := uint32(1); n <= 7; n++ {
			require.NoError(t, h(ctx, delivery("k", "p", n)), "copy of %d", n)
		}
		require.NoError(t, h(ctx, delivery("k", "p", 8)))
		times, order := applied(t, one)
		for n := uint32(1); n <= 8; n++ {
			assert.Equal(t, 1, times["k/"+ordering.FormatSeq(uint64(n))], "number %d applied once", n)
		}
		assert.Equal(t, []uint64{1, 7, 4, 2, 6, 3, 5, 8}, order["k"])
		assert.Equal(t, inbox.Stats{Applied: 3, Copies: 7, Gaps: 1, Owed: 5}, ib.Stats())
		assert.Equal(t, int64(5), other.Stats().LateApplied)
	})
}

// TestGapWaitsThenOwes: the message after a gap answers RetryAfter, on
// every replica, from the time the first found it; a missing number that
// comes meanwhile closes the gap; once the wait is over, the numbers are
// owed and the message applies.
func TestGapWaitsThenOwes(t *testing.T) {
	eachDatabase(t, func(t *testing.T, db database) {
		ctx := timeout(t, 30*time.Second)
		one, two := db.open(t)
		const wait = 400 * time.Millisecond
		var seen gaps
		a := newInbox(t, one, db.dialect, inbox.WithGapWait(wait), inbox.WithGapHandler(seen.handler))
		b := newInbox(t, two, db.dialect, inbox.WithGapWait(wait), inbox.WithGapHandler(seen.handler))
		ha, hb := a.Handler(record(db.dialect)), b.Handler(record(db.dialect))
		require.NoError(t, ha(ctx, delivery("k", "p", 1)))

		// 3 waits for 2, which another replica applies meanwhile.
		requireWaits(t, ha(ctx, delivery("k", "p", 3)), wait)
		requireWaits(t, hb(ctx, delivery("k", "p", 3)), wait)
		require.NoError(t, hb(ctx, delivery("k", "p", 2)))
		require.NoError(t, ha(ctx, delivery("k", "p", 3)), "the gap closed")
		assert.Empty(t, seen.all())

		// 5 waits for 4, which does not come.
		began := time.Now()
		err := ha(ctx, delivery("k", "p", 5))
		for ; err != nil; err = hb(ctx, delivery("k", "p", 5)) {
			var ra *subscriber.RetryAfterError
			require.ErrorAs(t, err, &ra)
			require.LessOrEqual(t, ra.Delay, wait, "no longer than the wait left")
			select {
			case <-time.After(ra.Delay):
			case <-ctx.Done():
				t.Fatal(ctx.Err())
			}
		}
		assert.GreaterOrEqual(t, time.Since(began), wait, "5 waited the whole wait, across replicas")
		require.Len(t, seen.all(), 1)
		assert.Equal(t, uint64(4), seen.all()[0].From)
		require.NoError(t, ha(ctx, delivery("k", "p", 4)), "owed, late")
		times, order := applied(t, one)
		assert.Len(t, times, 5)
		assert.Equal(t, []uint64{1, 2, 3, 5, 4}, order["k"])
		assert.Equal(t, int64(1), a.Stats().LateApplied)
		assert.Positive(t, a.Stats().GapWaits+b.Stats().GapWaits)
	})
}

func requireWaits(t *testing.T, err error, wait time.Duration) {
	t.Helper()
	require.ErrorIs(t, err, inbox.ErrGapWait)
	var ra *subscriber.RetryAfterError
	require.ErrorAs(t, err, &ra, "a wait costs no attempt")
	assert.LessOrEqual(t, ra.Delay, wait)
}

// TestEpochs: a higher epoch starts again at 1, the unused end of the old
// one no gap; a higher epoch's first number above 1 is a gap within it;
// a lower epoch's number is a copy.
func TestEpochs(t *testing.T) {
	eachDatabase(t, func(t *testing.T, db database) {
		ctx := timeout(t, 30*time.Second)
		one, _ := db.open(t)
		var seen gaps
		ib := newInbox(t, one, db.dialect, inbox.WithGapWait(0), inbox.WithGapHandler(seen.handler))
		h := ib.Handler(record(db.dialect))
		at := func(epoch, n uint32) *subscriber.Delivery {
			d := delivery("k", "p", n)
			d.Seq = ordering.MakeSeq(epoch, n)
			d.ID = "k-" + ordering.FormatSeq(d.Seq)
			return d
		}
		for _, d := range []*subscriber.Delivery{at(0, 1), at(0, 2), at(1, 1), at(1, 2), at(3, 3), at(0, 3), at(2, 1)} {
			require.NoError(t, h(ctx, d))
		}
		_, order := applied(t, one)
		seq := ordering.MakeSeq
		assert.Equal(t, []uint64{seq(0, 1), seq(0, 2), seq(1, 1), seq(1, 2), seq(3, 3)}, order["k"])
		require.Len(t, seen.all(), 1)
		assert.Equal(t, seq(3, 1), seen.all()[0].From)
		assert.Equal(t, seq(3, 2), seen.all()[0].To)
		assert.Equal(t, int64(2), ib.Stats().Copies, "0.3 and 2.1, of older epochs")
	})
}

// TestPrune forgets idle producers, and keeps, however idle, one that
// owes numbers; a pruned producer's next number above 1 is a gap again,
// never a start: forgetting costs at worst a re-application.
func TestPrune(t *testing.T) {
	eachDatabase(t, func(t *testing.T, db database) {
		ctx := timeout(t, 30*time.Second)
		one, _ := db.open(t)
		ib := newInbox(t, one, db.dialect, inbox.WithGapWait(0))
		h := ib.Handler(record(db.dialect))
		for _, d := range []*subscriber.Delivery{delivery("k", "old", 1), delivery("k", "old", 2), delivery("k", "new", 1), delivery("k", "new", 3)} {
			require.NoError(t, h(ctx, d))
		}
		_, err := ib.Prune(ctx, time.Minute)
		require.ErrorIs(t, err, inbox.ErrInvalidConfig)
		n, err := ib.Prune(ctx, time.Hour)
		require.NoError(t, err)
		assert.Zero(t, n, "nothing is idle yet")

		idle(t, one, db.dialect, 48*time.Hour)
		n, err = ib.Prune(ctx, 24*time.Hour)
		require.NoError(t, err)
		assert.Equal(t, int64(1), n, "old is forgotten, new owes 2")
		assert.Equal(t, 1, count(t, one, `SELECT COUNT(*) FROM keyorder_inbox_owed`), "new's owed run stays")
		assert.Equal(t, 2, count(t, one, `SELECT COUNT(*) FROM keyorder_inbox`), "new's row and the made row stay")

		require.NoError(t, h(ctx, delivery("k", "new", 2)), "still owed")
		require.NoError(t, h(ctx, delivery("k", "old", 9)), "a gap: 1 to 8 owed")
		require.NoError(t, h(ctx, delivery("k", "old", 2)), "owed again: a re-application, not a skip")
		times, _ := applied(t, one)
		assert.Equal(t, 3, times["k/0.2"], "new's 2, and old's twice: re-applied after the prune")
		assert.Equal(t, 1, times["k/0.9"])
		assert.Equal(t, int64(2), ib.Stats().LateApplied)
		assert.Equal(t, int64(2), ib.Stats().Gaps)
	})
}

// idle makes every producer's row of the default table look untouched
// for d.
func idle(t *testing.T, db *sql.DB, dialect inbox.Dialect, d time.Duration) {
	t.Helper()
	_, err := db.ExecContext(context.Background(), rebind(dialect, `UPDATE keyorder_inbox SET touched = ? WHERE key <> ''`), time.Now().Add(-d).Unix())
	require.NoError(t, err)
}

// TestPruneDuringWait: a key idle for two hours gets 5 while 4 is late;
// Prune runs while 5 waits, and keeps the row 5 waits on; then 4 comes:
// both are applied, in order, and neither is taken for a copy.
func TestPruneDuringWait(t *testing.T) {
	eachDatabase(t, func(t *testing.T, db database) {
		ctx := timeout(t, 30*time.Second)
		one, _ := db.open(t)
		ib := newInbox(t, one, db.dialect, inbox.WithGapWait(time.Minute))
		h := ib.Handler(record(db.dialect))
		for n := uint32(1); n <= 3; n++ {
			require.NoError(t, h(ctx, delivery("k", "p", n)))
		}
		idle(t, one, db.dialect, 2*time.Hour)
		requireWaits(t, h(ctx, delivery("k", "p", 5)), time.Minute)
		n, err := ib.Prune(ctx, time.Hour)
		require.NoError(t, err)
		assert.Zero(t, n, "5 waits on the row")
		requireWaits(t, h(ctx, delivery("k", "p", 5)), time.Minute)

		require.NoError(t, h(ctx, delivery("k", "p", 4)))
		require.NoError(t, h(ctx, delivery("k", "p", 5)))
		_, order := applied(t, one)
		assert.Equal(t, []uint64{1, 2, 3, 4, 5}, order["k"])
		assert.Zero(t, ib.Stats().Copies)

		// A row whose wait is open stays, however idle: its message may
		// be parked, or dead-lettered and redriven.
		requireWaits(t, h(ctx, delivery("k", "p", 7)), time.Minute)
		idle(t, one, db.dialect, 2*time.Hour)
		n, err = ib.Prune(ctx, time.Hour)
		require.NoError(t, err)
		assert.Zero(t, n)
	})
}

func count(t *testing.T, db interface {
	QueryRowContext(context.Context, string, ...any) *sql.Row
}, q string) int {
	t.Helper()
	var n int
	require.NoError(t, db.QueryRowContext(context.Background(), q).Scan(&n))
	return n
}

// TestTablesApart: two inboxes in one database, WithTable apart, each
// apply every message: two services' records of one topic.
func TestTablesApart(t *testing.T) {
	eachDatabase(t, func(t *testing.T, db database) {
		ctx := timeout(t, 30*time.Second)
		one, _ := db.open(t)
		a := newInbox(t, one, db.dialect)
		b := newInbox(t, one, db.dialect, inbox.WithTable("billing_inbox"))
		require.NoError(t, a.Handler(record(db.dialect))(ctx, delivery("k", "p", 1)))
		require.NoError(t, b.Handler(record(db.dialect))(ctx, delivery("k", "p", 1)))
		times, _ := applied(t, one)
		assert.Equal(t, 2, times["k/0.1"])
	})
}

func TestNewRefuses(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, _ := databases[0].open(t)
	for name, tc := range map[string]struct {
		d    inbox.Dialect
		opts []inbox.Option
	}{
		"dialect":   {inbox.Dialect(9), nil},
		"table":     {inbox.SQLite, []inbox.Option{inbox.WithTable("Bad-Name")}},
		"gap wait":  {inbox.SQLite, []inbox.Option{inbox.WithGapWait(-time.Second)}},
		"long wait": {inbox.SQLite, []inbox.Option{inbox.WithGapWait(time.Hour)}},
		"handler":   {inbox.SQLite, []inbox.Option{inbox.WithGapHandler(nil)}},
		"logger":    {inbox.SQLite, []inbox.Option{inbox.WithLogger(nil)}},
		"meter":     {inbox.SQLite, []inbox.Option{inbox.WithMeterProvider(nil)}},
	} {
		_, err := inbox.New(ctx, db, tc.d, tc.opts...)
		assert.True(t, errors.Is(err, inbox.ErrInvalidConfig), "%s: %v", name, err)
	}
	_, err := inbox.New(ctx, nil, inbox.SQLite)
	assert.ErrorIs(t, err, inbox.ErrInvalidConfig)
}

// TestSilenceIsNoStart: a producer's first number above 1 is a gap from
// 1 of its epoch, waited for; the numbers below it, when they come, are
// applied in order, not taken for copies; with no wait, they are owed.
func TestSilenceIsNoStart(t *testing.T) {
	eachDatabase(t, func(t *testing.T, db database) {
		ctx := timeout(t, 30*time.Second)
		one, two := db.open(t)
		var seen gaps
		waiting := newInbox(t, one, db.dialect, inbox.WithGapWait(time.Minute))
		h := waiting.Handler(record(db.dialect))
		requireWaits(t, h(ctx, delivery("k", "p", 3)), time.Minute)
		requireWaits(t, h(ctx, delivery("j", "p", 3)), time.Minute)
		for n := uint32(1); n <= 3; n++ {
			require.NoError(t, h(ctx, delivery("k", "p", n)))
		}
		h0 := newInbox(t, two, db.dialect, inbox.WithGapWait(0), inbox.WithGapHandler(seen.handler)).Handler(record(db.dialect))
		epoch := delivery("e", "p", 3)
		epoch.Seq = ordering.MakeSeq(2, 3)
		require.NoError(t, h0(ctx, epoch), "no wait: 2.1 and 2.2 owed")
		for _, n := range []uint32{2, 1} {
			d := delivery("e", "p", n)
			d.Seq = ordering.MakeSeq(2, n)
			require.NoError(t, h0(ctx, d), "owed %d, applied late", n)
		}
		_, order := applied(t, one)
		assert.Equal(t, []uint64{1, 2, 3}, order["k"])
		assert.Empty(t, order["j"], "j's 3 still waits")
		seq := ordering.MakeSeq
		assert.Equal(t, []uint64{seq(2, 3), seq(2, 2), seq(2, 1)}, order["e"])
		require.Len(t, seen.all(), 1)
		assert.Equal(t, seq(2, 1), seen.all()[0].From)
		assert.Zero(t, waiting.Stats().Copies)
	})
}

// TestAdoption: a producer's first message published before the table
// was made starts its record, counted as adopted; one published after,
// or with no publish time, waits for number 1. Every Inbox on the table
// reads the one time its first New recorded.
func TestAdoption(t *testing.T) {
	eachDatabase(t, func(t *testing.T, db database) {
		ctx := timeout(t, 30*time.Second)
		one, two := db.open(t)
		before := time.Now().Add(-time.Second)
		first := newInbox(t, one, db.dialect, inbox.WithGapWait(time.Minute))
		between := time.Now().Add(time.Millisecond)
		require.NoError(t, waitUntil(ctx, between))
		second := newInbox(t, two, db.dialect, inbox.WithGapWait(time.Minute))
		h := second.Handler(record(db.dialect))

		old := delivery("k", "p", 7)
		old.PublishTime = before
		require.NoError(t, h(ctx, old), "published before the table was made: adopted")
		require.NoError(t, h(ctx, delivery("k", "p", 8)))
		require.NoError(t, h(ctx, delivery("k", "p", 6)), "below the adopted start: a copy")

		made := delivery("j", "p", 7)
		made.PublishTime = between
		requireWaits(t, h(ctx, made), time.Minute)
		requireWaits(t, h(ctx, delivery("i", "p", 7)), time.Minute)
		_, order := applied(t, one)
		assert.Equal(t, []uint64{7, 8}, order["k"])
		assert.Equal(t, int64(1), second.Stats().Adopted)
		assert.Equal(t, int64(1), second.Stats().Copies)
		assert.Zero(t, first.Stats().Adopted)
	})
}

// waitUntil returns once the clock has passed t.
func waitUntil(ctx context.Context, t time.Time) error {
	select {
	case <-time.After(time.Until(t)):
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

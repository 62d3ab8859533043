package outbox

import (
	"context"
	"database/sql"
	"sync"
	"sync/atomic"
	"time"

	"github.com/keyorder/keyorder/publisher"
)

// A run is one [Relay.Run]'s state. Its fields are the Run goroutine's
// alone, except done, on which each waiter sends its batch, and wg, which
// counts the waiters.
//
// What the run reads rests on one invariant: in a shard the run has held
// since its last complete pass, an event marked sent (sent > 0) is in
// flight, or belongs to a key in failing or resume. So a pass reads the
// unsent events of those shards only, and every event of the shards
// taken since (fresh) and of the keys due again (resume).
type run struct {
	r *Relay

	owned      map[int]bool // shards this run holds
	leaving    map[int]bool // shards of owned to give up once nothing of theirs is in flight
	fresh      map[int]int  // shards of owned taken since the last complete pass, to the take's number
	takes      int          // numbers the takes
	validUntil atomic.Int64 // when the leases of owned run out, unless renewed, in Unix ns; the renewer writes it too
	seenFree   map[int]bool // shards the last lease round found free

	pass      *pass // the pass under way, nil between passes
	passAfter bool  // a wake came during the pass: another follows it (read)
	// poll is the fallback's timer: each read sets it to a poll interval
	// from its end, so that the relay reads at least that often, and no
	// more often for the poll's sake.
	poll *time.Timer

	keys         map[string]*chain  // keys with events in flight
	inflightRows int                // events in flight, over keys
	batches      int                // batches not settled, over keys: their chains' batches
	failing      map[string]failure // keys whose last run failed, until one succeeds
	resume       map[string]bool    // keys whose sent events are to be read again
	aside        map[string]failure // keys set aside for a bad row
	gen          int                // numbers the chains
	closed       bool               // the publisher is closed: Run returns ErrClosed

	done chan *batch // from waiters, to Run; unbuffered
	// The delete of what the service took runs beside Run, one at a time,
	// so that Run reads, marks and publishes meanwhile: dels are the
	// batches settled and not yet given to a delete, the first of them
	// settled at delsSince (see deleteDue), deleting those of
	// the delete under way (nil if none), whose error comes on deleted.
	// A chain stays in keys until its batches' deletes are done, so that
	// no read takes its events, taken and not yet deleted, for pending.
	dels        []*batch
	delsSince   time.Time
	burst       bool // a page of events or more went in flight, and something still is (deleteDue)
	deleting    []*batch
	deleted     chan error // buffered: the delete never waits for Run
	conn        keptConn   // the deletes' connection, and on SQLite the marks' (exec)
	waitCtx     context.Context
	stopWaiting context.CancelFunc   // ends the waiters' waits at the end of Run
	pages       map[string]*sql.Stmt // SQLite: the page statements, prepared (queryPage)
	wg          sync.WaitGroup
}

// A pass reads the run's shards from the first key to the last, a page
// at a time; it pauses while the run has no room, and the next read goes
// on from its cursor.
type pass struct {
	fresh map[int]int     // the shards read whole, and their takes, as they were at the start
	due   []string        // the keys read whole: resume's, out of their backoff
	isDue map[string]bool // due's
	keep  map[string]bool // keys of due to read whole again all the same
	// skip holds the keys of which the pass left an event unpublished:
	// nothing later of theirs is published in this pass.
	skip    map[string]bool
	key     string // the cursor: the pass goes on after (key, seq)...
	seq     int64
	keyOnly bool // ...or after every row of key
	started bool // the cursor is set
}

// A chain is a key's events in flight: each published WithAfter the one
// before, so that the key's next events go behind them at once, and a
// failure fails everything after it (P4).
type chain struct {
	shard   int
	next    int64             // the number after the last one published
	last    *publisher.Result // the last one's Result
	batches int               // batches of the chain not settled
	deletes int               // batches settled whose delete is not done
	failed  bool              // one of them failed: publish nothing more
	gen     int
	// settleNext is the first number of the chain's earliest batch not
	// settled; a batch whose waiter was quicker waits in parked, so that
	// the chain's batches are settled in their order.
	settleNext int64
	parked     map[int64]*batch
}

// A batch is a run of a key's events handed to the publisher together,
// with consecutive numbers.
type batch struct {
	key     string
	shard   int
	first   int64 // the first event's number
	gen     int   // the chain's
	results []*publisher.Result
	// Set by the batch's waiter before it sends the batch on done.
	ok  int   // how many, from the first, the service took
	err error // the first failure, nil if every event was taken
}

// A failure is a key's episode of failed runs, or of bad rows.
type failure struct {
	count int       // failures in a row
	until time.Time // the key is not sent again before
	gen   int       // the chain whose failure was counted last
	next  int64     // set aside: the number the key's next run starts with; 0 for any
}

// sendNow is a context already done: Flush with it sends what lingers,
// and waits for nothing.
var sendNow = func() context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	return ctx
}()

func newRun(r *Relay) *run {
	ru := &run{
		r: r, owned: map[int]bool{}, leaving: map[int]bool{}, fresh: map[int]int{}, seenFree: map[int]bool{},
		keys: map[string]*chain{}, failing: map[string]failure{}, resume: map[string]bool{}, aside: map[string]failure{},
		done: make(chan *batch), deleted: make(chan error, 1), poll: time.NewTimer(0),
	}
	ru.waitCtx, ru.stopWaiting = context.WithCancel(context.Background())
	return ru
}

// room reports whether the run may read another page of events.
func (ru *run) room() bool { return ru.inflightRows < ru.r.cfg.inflight }

// read reads and publishes, page after page, until the pass is complete
// or the run has no room. It reports whether it published anything.
//
// A pass that paused for room goes on from its cursor. A wake (wake: a
// commit's notification or Add's, a listener back, shards taken; not a
// poll) asks for everything committed before it: so once such a pass is
// complete, now or at a later read, another one starts. The pass alone
// would leave what was committed on keys it had read past, and the keys
// due since it began (a delete that failed), to the next wake or poll.
func (ru *run) read(ctx context.Context, wake bool) bool {
	defer ru.poll.Reset(ru.r.cfg.poll)
	// After the read's publishes: one that waited a poll interval, with
	// no settle since.
	defer ru.startDelete(ctx)
	if wake && ru.pass != nil {
		ru.passAfter = true
	}
	published := false
	for !ru.closed && len(ru.owned) > 0 && ru.room() && time.Now().UnixNano() < ru.validUntil.Load() && ctx.Err() == nil {
		if ru.pass == nil {
			ru.pass, ru.passAfter = ru.newPass(), false
		}
		full, err := ru.query(ctx, func(rows []row) error {
			groups := ru.group(rows)
			if len(groups) == 0 {
				return nil
			}
			for start := 0; start < len(groups); start += markStep {
				marked, err := ru.mark(ctx, groups[start:min(start+markStep, len(groups))])
				if err != nil {
					for _, g := range groups[start:] {
						ru.resume[g[0].key] = true // marked, maybe, and not sent
						ru.unpublished(g[0].key)
					}
					return &markError{err}
				}
				for _, g := range marked {
					ru.publish(ctx, g)
					published = true
				}
				if len(marked) > 0 {
					// Each key's run is published whole: its linger
					// would gather nothing more, and would hold the
					// run 1 to 5 ms.
					_ = ru.r.pub.Flush(sendNow)
				}
			}
			return nil
		})
		if err != nil {
			if ctx.Err() == nil {
				if m, ok := err.(*markError); ok {
					ru.r.rec.dbFailed("mark events sent", m.err)
				} else {
					ru.r.rec.dbFailed("read events", err)
				}
			}
			return published
		}
		if !full {
			ru.endPass()
			if !ru.passAfter {
				return published
			}
		}
	}
	return published
}

// A markError is a mark's failure, which ends a read.
type markError struct{ err error }

func (e *markError) Error() string { return e.err.Error() }

// newPass starts a pass: the fresh shards and the keys due are read whole.
func (ru *run) newPass() *pass {
	p := &pass{fresh: map[int]int{}, isDue: map[string]bool{}, keep: map[string]bool{}, skip: map[string]bool{}}
	for s, take := range ru.fresh {
		if ru.owned[s] && !ru.leaving[s] {
			p.fresh[s] = take
		}
	}
	now := time.Now()
	for key := range ru.resume {
		if _, busy := ru.keys[key]; !busy && !now.Before(ru.failing[key].until) {
			p.due = append(p.due, key)
			p.isDue[key] = true
		}
	}
	return p
}

// endPass ends a complete pass: what it read whole is read.
func (ru *run) endPass() {
	for s, take := range ru.pass.fresh {
		if t, ok := ru.fresh[s]; ok && t == take {
			delete(ru.fresh, s)
		}
	}
	for _, key := range ru.pass.due {
		if !ru.pass.keep[key] {
			delete(ru.resume, key)
		}
	}
	ru.pass = nil
}

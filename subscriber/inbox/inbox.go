package inbox

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math"
	"sync/atomic"
	"time"

	"github.com/keyorder/keyorder/ordering"
	"github.com/keyorder/keyorder/subscriber"
)

// An Inbox records, in the database of a service's own state, which
// (key, producer, number) stamps have been applied, in the transaction
// that applies them. It is safe for concurrent use, and any number of
// Inboxes, in any number of processes, may share one table: each
// message's transaction locks its (key, producer) record first.
type Inbox struct {
	db  *sql.DB
	cfg config
	q   queries
	// lock is the statement of every message, prepared once: parsing it
	// cost SQLite a sixth of a message's time. A transaction uses the
	// connection's own (sql.Tx.StmtContext).
	lock   *sql.Stmt
	obs    *recorder
	closed atomic.Bool
}

// An ApplyFunc applies a message's effect in tx, the transaction that
// records it. It must not commit or roll tx back. Its error rolls the
// transaction back, and the handler returns it as it is, so that the
// subscription retries, holds or parks the message as it would any
// handler's error (S5); a subscriber.Permanent or subscriber.RetryAfter
// keeps its meaning.
type ApplyFunc func(ctx context.Context, tx *sql.Tx, d *subscriber.Delivery) error

// New returns an Inbox on db, whose dialect is d, and creates its tables
// if they are missing; several processes may do so at once.
func New(ctx context.Context, db *sql.DB, d Dialect, opts ...Option) (*Inbox, error) {
	if db == nil {
		return nil, fmt.Errorf("%w: nil *sql.DB", ErrInvalidConfig)
	}
	if d != SQLite && d != PostgreSQL {
		return nil, fmt.Errorf("%w: %v is not SQLite or PostgreSQL", ErrInvalidConfig, d)
	}
	cfg := defaultConfig()
	for _, o := range opts {
		if err := o(&cfg); err != nil {
			return nil, err
		}
	}
	if err := createTables(ctx, db, d, cfg.table); err != nil {
		return nil, err
	}
	in := &Inbox{db: db, cfg: cfg, q: newQueries(d, cfg.table), obs: newRecorder(cfg)}
	var err error
	if in.lock, err = db.PrepareContext(ctx, in.q.lock); err != nil {
		return nil, err
	}
	return in, nil
}

// Close lets the inbox's prepared statement go. The handlers it gave
// return [ErrClosed] from then on, without applying anything; a call
// already running commits, or fails and rolls back. It does not close
// the *sql.DB, which is the caller's, and it is idempotent.
func (in *Inbox) Close() error {
	if in.closed.Swap(true) {
		return nil
	}
	return in.lock.Close()
}

// Handler returns a subscriber.Handler that applies each message once,
// whichever replica it is delivered to and however often: it runs apply
// and the record of the message's stamp in one transaction, and commits
// both or neither.
//
//   - A message whose number the store holds as applied, by this process
//     or any other sharing the table, is a copy: nothing is applied or
//     committed, and the handler returns nil, so that it is acked (S12).
//   - A number past the next is a gap: the message waits (see
//     [WithGapWait]) for the missing numbers, then the inbox records them
//     as owed, reports the gap ([WithGapHandler]) and applies the message.
//     An owed number that comes later is applied once, never taken for a
//     copy.
//   - A message without a key or a stamp is refused with [ErrUnstamped],
//     or applied without a record with [WithUnstampedAtLeastOnce].
//
// The handler is the same on every door of the subscription's one call
// path: a Receive, a push endpoint, the release of a parked key, with or
// without exactly-once delivery. On an exactly-once subscription a
// message whose ack failed after its commit comes back, and is acked as a
// copy.
func (in *Inbox) Handler(apply ApplyFunc) subscriber.Handler {
	return func(ctx context.Context, d *subscriber.Delivery) error {
		if in.closed.Load() {
			return fmt.Errorf("%w: message %s not applied", ErrClosed, d.ID)
		}
		if d.Key == "" || d.Seq == 0 {
			return in.unstamped(ctx, d, apply)
		}
		if d.Seq > math.MaxInt64 {
			return subscriber.Permanent(fmt.Errorf("%w: message %s, %s of %s", ErrSeqRange, d.ID, ordering.FormatSeq(d.Seq), d.Producer))
		}
		out, err := in.record(ctx, d, apply)
		if err != nil {
			return err
		}
		return in.report(ctx, d, out)
	}
}

// outcome is what one call of the handler did.
type outcome struct {
	step step
	// recorded is set when the lock statement recorded the number as
	// applied already: the next, or the first (store.go, qLock).
	recorded bool
	owed     bool            // older, and owed: applied late
	wait     time.Duration   // a gap's wait left; 0 once it is over
	began    bool            // this call began the gap's wait
	gap      *subscriber.Gap // recorded as owed
}

// record runs d's transaction: the lock and the rule (decide), apply,
// the record. The deferred rollback covers a panic and runtime.Goexit in
// apply, so that no transaction is left open whatever it does.
func (in *Inbox) record(ctx context.Context, d *subscriber.Delivery, apply ApplyFunc) (out outcome, err error) {
	tx, err := in.db.BeginTx(ctx, nil)
	if err != nil {
		return out, err
	}
	done := false
	defer func() {
		if !done {
			_ = tx.Rollback()
		}
	}()
	now := time.Now()
	out, run, err := in.decide(ctx, tx, d, now)
	switch {
	case err != nil:
		return out, err
	case !run && !out.began:
		return out, nil // a copy, or a wait recorded already: nothing to commit
	case run:
		if err := apply(ctx, tx, d); err != nil {
			return out, err
		}
		if err := in.advance(ctx, tx, d, out, now); err != nil {
			return out, err
		}
	}
	done = true
	return out, tx.Commit()
}

// decide locks d's (key, producer) row and applies the rule to it: run
// reports whether d is to be applied; a gap's wait, or a copy, is not.
func (in *Inbox) decide(ctx context.Context, tx *sql.Tx, d *subscriber.Delivery, now time.Time) (out outcome, run bool, err error) {
	var prev, last, waitSeq, waitSince int64
	err = tx.StmtContext(ctx, in.lock).QueryRowContext(ctx, d.Key, d.Producer, int64(d.Seq), now.Unix()).Scan(&prev, &last, &waitSeq, &waitSince)
	if err != nil {
		return out, false, err
	}
	var from, to uint64
	out.step, from, to = classify(uint64(prev), d.Seq)
	out.recorded = uint64(last) == d.Seq && prev != last
	if out.recorded && out.step != first && out.step != next {
		// The statement's rule and classify's disagree: undo it all
		// rather than record a number the rule did not apply.
		return out, false, fmt.Errorf("keyorder/inbox: internal error: %s recorded after %s", ordering.FormatSeq(d.Seq), ordering.FormatSeq(uint64(prev)))
	}
	switch out.step {
	case gap:
		out, err = in.gapped(ctx, tx, d, out, from, to, uint64(waitSeq), waitSince, now)
		return out, err == nil && out.wait == 0, err
	case older:
		out.owed, err = in.takeOwed(ctx, tx, d)
		return out, out.owed, err
	}
	return out, true, nil
}

// advance records d as applied, unless the lock statement did: its
// number as the highest, or, for an owed one, which leaves the highest as
// it is, only the time.
func (in *Inbox) advance(ctx context.Context, tx *sql.Tx, d *subscriber.Delivery, out outcome, now time.Time) (err error) {
	switch {
	case out.recorded:
		return nil
	case out.step == older:
		_, err = tx.ExecContext(ctx, in.q.touch, now.Unix(), d.Key, d.Producer)
	default:
		_, err = tx.ExecContext(ctx, in.q.applied, int64(d.Seq), now.Unix(), d.Key, d.Producer)
	}
	return err
}

// gapped decides what a message after a gap does: wait, recording when
// the wait began if this call began it, or, once the wait is over, record
// the missing numbers as owed. waitSeq and waitSince are the row's record
// of the wait, which any replica may have begun.
func (in *Inbox) gapped(ctx context.Context, tx *sql.Tx, d *subscriber.Delivery, out outcome, from, to, waitSeq uint64, waitSince int64, now time.Time) (outcome, error) {
	since := time.UnixMilli(waitSince)
	if waitSeq != d.Seq {
		since, out.began = now, true
	}
	if left := in.cfg.gapWait - now.Sub(since); left > 0 {
		out.wait = left
		if out.began {
			_, err := tx.ExecContext(ctx, in.q.wait, int64(d.Seq), now.UnixMilli(), d.Key, d.Producer)
			return out, err
		}
		return out, nil
	}
	out.began = false
	if _, err := tx.ExecContext(ctx, in.q.addOwed, d.Key, d.Producer, int64(from), int64(to)); err != nil {
		return out, err
	}
	out.gap = &subscriber.Gap{Key: d.Key, Producer: d.Producer, From: from, To: to, MessageID: d.ID, Seq: d.Seq}
	return out, nil
}

// takeOwed reports whether d's number is owed, and if so takes it out of
// its run, which it splits in two if the number is inside it.
func (in *Inbox) takeOwed(ctx context.Context, tx *sql.Tx, d *subscriber.Delivery) (bool, error) {
	seq := int64(d.Seq)
	var lo, hi int64
	err := tx.QueryRowContext(ctx, in.q.findOwed, d.Key, d.Producer, seq, seq).Scan(&lo, &hi)
	if errors.Is(err, sql.ErrNoRows) {
		return false, nil
	} else if err != nil {
		return false, err
	}
	if _, err := tx.ExecContext(ctx, in.q.delOwed, d.Key, d.Producer, lo); err != nil {
		return false, err
	}
	for _, run := range [][2]int64{{lo, seq - 1}, {seq + 1, hi}} {
		if run[0] > run[1] {
			continue
		}
		if _, err := tx.ExecContext(ctx, in.q.addOwed, d.Key, d.Producer, run[0], run[1]); err != nil {
			return false, err
		}
	}
	return true, nil
}

// pollGap bounds each wait of a message after a gap, so that a missing
// number another replica applies meanwhile is seen within a second.
const pollGap = time.Second

// report counts and logs what a committed (or, for a copy, a rolled back)
// call did, tells the gap handler of a gap it recorded, and returns the
// handler's answer: nil, or the RetryAfter of a gap's wait.
func (in *Inbox) report(ctx context.Context, d *subscriber.Delivery, out outcome) error {
	switch {
	case out.wait > 0:
		in.obs.waiting(ctx, d, out.began)
		return subscriber.RetryAfter(min(out.wait, pollGap), fmt.Errorf("%w: key %s, producer %s, before %s", ErrGapWait, d.Key, d.Producer, ordering.FormatSeq(d.Seq)))
	case out.step == older && !out.owed:
		in.obs.copied(ctx, d)
		return nil
	case out.owed:
		in.obs.lateApplied(ctx, d)
		return nil
	}
	in.obs.applied(ctx)
	if out.gap != nil {
		in.obs.gap(ctx, *out.gap, in.cfg.gapWait)
		if in.cfg.onGap != nil {
			in.cfg.onGap(*out.gap)
		}
	}
	return nil
}

// unstamped refuses d, or applies it without a record.
func (in *Inbox) unstamped(ctx context.Context, d *subscriber.Delivery, apply ApplyFunc) (err error) {
	if !in.cfg.unstamped {
		in.obs.refused(ctx)
		return subscriber.Permanent(fmt.Errorf("%w: message %s", ErrUnstamped, d.ID))
	}
	tx, err := in.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	done := false
	defer func() {
		if !done {
			_ = tx.Rollback()
		}
	}()
	if err := apply(ctx, tx, d); err != nil {
		return err
	}
	done = true
	if err := tx.Commit(); err != nil {
		return err
	}
	in.obs.unstampedApplied(ctx)
	return nil
}

// Prune forgets the producers whose record has been idle for longer than
// idle, and the numbers they owe, and returns how many (key, producer)
// records it deleted. A pruned producer's next number starts its sequence
// afresh, as a first one does: a copy of one of its messages that comes
// after the prune is applied a second time, so idle must be longer than
// any copy can take to come: the subscription's message retention (7
// days by default, at most 31), and further back than any Seek or replay
// reaches. keyorder's publisher stamps each process run as a producer of
// its own, so that without pruning the table grows by a row per key per
// publisher run. idle is at least an hour.
func (in *Inbox) Prune(ctx context.Context, idle time.Duration) (n int64, err error) {
	if idle < time.Hour {
		return 0, fmt.Errorf("%w: Prune(%v): idle is at least an hour", ErrInvalidConfig, idle)
	}
	tx, err := in.db.BeginTx(ctx, nil)
	if err != nil {
		return 0, err
	}
	defer func() {
		if err != nil {
			_ = tx.Rollback()
		}
	}()
	res, err := tx.ExecContext(ctx, in.q.prune, time.Now().Add(-idle).Unix())
	if err != nil {
		return 0, err
	}
	if n, err = res.RowsAffected(); err != nil {
		return 0, err
	}
	if _, err = tx.ExecContext(ctx, in.q.pruneOrphan); err != nil {
		return 0, err
	}
	return n, tx.Commit()
}

// Stats returns the inbox's counts since New.
func (in *Inbox) Stats() Stats { return in.obs.stats() }

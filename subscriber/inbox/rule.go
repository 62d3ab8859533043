package inbox

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/keyorder/keyorder/ordering"
	"github.com/keyorder/keyorder/subscriber"
)

// outcome is what one call of the handler did.
type outcome struct {
	step step
	// recorded is set when the lock statement recorded the number as
	// applied already: the next, or the number a new row was made with
	// (store.go, qLock).
	recorded bool
	// fresh is set when the lock statement made the row, with a number
	// above 1 that is not the start: gapped writes the row's truth.
	fresh   bool
	adopted bool            // a first number above 1, published before the inbox was made
	owed    bool            // older, and owed: applied late
	wait    time.Duration   // a gap's wait left; 0 once it is over
	began   bool            // this call began the gap's wait
	gap     *subscriber.Gap // recorded as owed
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
	switch {
	case out.recorded && out.step == gap && prev == 0:
		out.fresh = true // a new row holds d's number, which is not its start
	case out.recorded && out.step != next:
		// The statement's rule and classify's disagree: undo it all
		// rather than record a number the rule did not apply.
		return out, false, fmt.Errorf("keyorder/inbox: internal error: %s recorded after %s", ordering.FormatSeq(d.Seq), ordering.FormatSeq(uint64(prev)))
	}
	switch out.step {
	case gap:
		if prev == 0 && in.adopts(d) {
			out.adopted = true
			return out, true, nil
		}
		out, err = in.gapped(ctx, tx, d, out, uint64(prev), from, to, uint64(waitSeq), waitSince, now)
		return out, err == nil && out.wait == 0, err
	case older:
		out.owed, err = in.takeOwed(ctx, tx, d)
		return out, out.owed, err
	}
	return out, true, nil
}

// adopts reports whether d, the first of its (key, producer) the inbox
// applies, with a number above 1, starts its record as it is: a message
// published before the inbox was made, whose producer's earlier numbers
// were the business of whatever ran before it. A delivery without a
// publish time (a handler called by hand) proves nothing, and is not.
func (in *Inbox) adopts(d *subscriber.Delivery) bool {
	return !d.PublishTime.IsZero() && d.PublishTime.Before(in.made)
}

// advance records d as applied, unless the lock statement did: its
// number as the highest, or, for an owed one, nothing more, since the
// lock statement touched the row and the highest stays as it is.
func (in *Inbox) advance(ctx context.Context, tx *sql.Tx, d *subscriber.Delivery, out outcome, now time.Time) error {
	if out.recorded || out.step == older {
		return nil
	}
	_, err := tx.ExecContext(ctx, in.q.applied, int64(d.Seq), now.Unix(), d.Key, d.Producer)
	return err
}

// gapped decides what a message after a gap does: wait, or, once the
// wait is over, record the missing numbers as owed. The row has one
// clock: wait_seq above the highest applied says a wait runs, since
// wait_since, begun by whichever call of whichever replica first found
// the row's next number missing; every message after the gap shares it,
// whatever its number, so that none restarts another's, and it stops
// when the row moves on (qLock, qApplied), its next number come or owed.
func (in *Inbox) gapped(ctx context.Context, tx *sql.Tx, d *subscriber.Delivery, out outcome, prev, from, to, waitSeq uint64, waitSince int64, now time.Time) (outcome, error) {
	since := time.UnixMilli(waitSince)
	if waitSeq <= prev {
		since, out.began = now, true
	}
	if left := in.cfg.gapWait - now.Sub(since); left > 0 {
		out.wait = left
		if out.began {
			// A new row's highest is 0, not d's number (out.fresh).
			_, err := tx.ExecContext(ctx, in.q.wait, int64(prev), int64(d.Seq), now.UnixMilli(), d.Key, d.Producer)
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

// report counts and logs what a committed call did, tells the gap
// handler of a gap it recorded, and returns the handler's answer: nil,
// or the RetryAfter of a gap's wait.
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
	case out.adopted:
		in.obs.adopted(ctx, d, in.made)
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

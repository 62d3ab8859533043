package engine

import (
	"context"
	"errors"
	"log/slog"
	"runtime/debug"
	"time"

	"github.com/keyorder/keyorder/internal/backoff"
	"github.com/keyorder/keyorder/ordering"
)

// The call path. Every handler call goes through call, whatever brought
// the message: a turn of a key's lane on the pull path (lane.go, which
// Replay's Receive also runs), a release of a parked key
// (parking/release_run.go), or a push request (push/endpoint.go). It decides, in this
// order, what becomes of the message:
//
//  1. Shutdown (S7): once Receive is stopping, nothing starts.
//  2. The ID window (S6): a message processed in this Receive, or run by
//     a release of a park that has ended, is not run again.
//  3. The sequence check (S12): a stamped copy of a number processed
//     already is not run.
//  4. The handler call: a panic becomes a *PanicError, runtime.Goexit
//     ErrHandlerExited; a failed call is reported to WithErrorHandler.
//  5. The failure decision (S5): a failed call counts against
//     WithMaxAttempts, across deliveries, unless it is a RetryAfter;
//     the message fails for good when its attempts are spent or the
//     handler said Permanent, and is otherwise called again after a
//     backoff. Once Receive is stopping, a failed call is not retried. A
//     message that fails for good parks its key with WithParking, holds
//     it on an ordered subscription, and is otherwise left to the service.
//
// Then it applies every consequence of the verdict, once, whatever the
// door: the record of a success, by message ID and by stamp, before the
// door settles it, so that a delivery that comes back after the ack is
// known; the attempts, fresh ones after a park; the counts; the logs and
// metrics of the call. The door delivers the verdict (settle), from a
// deferred call, so that a handler that exits its goroutine still has its
// message settled (S11); a gap the sequence check found is reported to
// WithGapHandler last, once nothing is left undone.
//
// Doors differ only in where deliveries come from and how a verdict is
// delivered: a lane acks, nacks, retries on a timer, holds or sends the
// key's deliveries to the parking topic; a release records the message in
// the control log, waits to call it again, or stops; a push request
// answers with a status, or moves the message to the parking topic.

// A Door is an entry point's side of the call path: it delivers each
// verdict the path reaches. Settle is called once per call, on the
// calling goroutine, even when the handler exits it.
type Door interface {
	Settle(j *Job, v Verdict)
}

// A Verdict is what the call path made of one call of a job.
type Verdict struct {
	Out   Outcome       // Acked to Failed
	Err   error         // the handler's error; nil unless it failed
	Delay time.Duration // Retried: the wait before the next call
	took  time.Duration // the handler call's duration; 0 if not called
	// deadLettered is set when the message fails for good on its last
	// delivery: nacked, the service forwards it to the dead-letter topic.
	deadLettered bool
}

// Call runs j through the call path and hands the verdict to d. j.d is
// complete but for Attempt, which call sets from the attempts window.
func (r *Engine) Call(j *Job, d Door) {
	// What runtime.Goexit leaves: judged as a failed call once the handler
	// was called; before that (a logger of the user's that exits, while
	// the checks log), a retry that costs no attempt, never an ack.
	v := Verdict{Out: Retried, Err: ErrHandlerExited, Delay: r.Cfg.MinBackoff}
	var began time.Time
	var gap *Gap
	defer func() {
		if !began.IsZero() {
			v.took = time.Since(began)
			v = r.judge(j, v)
			r.Obs.handled(j, v)
		}
		r.conclude(j, v)
		d.Settle(j, v)
		if gap != nil {
			r.reportGap(*gap) // user code, once the message is settled
		}
	}()
	if r.Stopped() {
		v = Verdict{Out: Shutdown} // S7
		return
	}
	if r.processedBefore(j.D.ID) {
		v = Verdict{Out: Deduplicated} // S6
		return
	}
	now := time.Now()
	var isCopy bool
	if isCopy, gap = r.checkSequence(j, now); isCopy {
		v = Verdict{Out: Deduplicated} // S12
		return
	}
	j.D.Attempt = r.tries.prior(j.D.ID).calls + 1
	began = now
	v.Err = InvokeHandler(r.h, handlerContext{Context: j.Ctx, life: j.lifeOr(r.handlerCtx)}, &j.D)
	if v.Err != nil {
		r.reportError(j, v.Err) // v is kept if this exits the goroutine
	}
}

// InvokeHandler calls h once, turning a panic into a *PanicError.
func InvokeHandler(h Handler, ctx context.Context, d *Delivery) (err error) {
	defer func() {
		if v := recover(); v != nil {
			err = &PanicError{Value: v, Stack: debug.Stack()}
		}
	}()
	return h(ctx, d)
}

// judge decides what becomes of a call that ended with v.err (S5).
func (r *Engine) judge(j *Job, v Verdict) Verdict {
	if v.Err == nil {
		return Verdict{Out: Acked, took: v.took}
	}
	if r.Stopped() {
		return Verdict{Out: Shutdown, Err: v.Err, took: v.took} // no retries once stopping (S7)
	}
	var later *RetryAfterError
	counted := !errors.As(v.Err, &later)
	failures := r.tries.fail(j.D.ID, j.D.Attempt, counted)
	v.Out, v.Delay = Retried, r.Backoff(failures)
	if later != nil {
		v.Delay = later.Delay
	}
	// A newer delivery that came during the call gets a call of its own:
	// the one that failed may be stale (its lease ran out).
	spent := counted && (failures >= r.Cfg.MaxAttempts || errors.As(v.Err, new(*PermanentError))) && !j.redelivered.Load()
	// A door that retries by a nack (push) would have the service
	// dead-letter a message on its last delivery: with parking, parking
	// wins, on every door, so that the key's later messages wait.
	lastChance := j.retriesByNack && r.parks(j) && r.DeadLettered(j)
	if spent || lastChance {
		v.Out = r.policy(j)
	}
	if v.Out == Failed || v.Out == HoldKey {
		v.deadLettered = r.DeadLettered(j)
		if v.deadLettered {
			v.Out = Failed // the service goes on with the key without it
		}
	}
	return v
}

// policy is the failure policy for j, which failed for good (S5).
func (r *Engine) policy(j *Job) Outcome {
	switch {
	case r.parks(j):
		return Parked
	case j.D.Key != "" && r.sub.Ordered:
		return HoldKey
	}
	return Failed // nothing to keep in order behind it (S8)
}

// parks reports whether a failure for good of j parks its key.
func (r *Engine) parks(j *Job) bool {
	return r.sub.Parks && r.sub.Ordered && j.D.Key != ""
}

// conclude applies the consequences of v, the verdict on j, that every
// door shares: the record of a success (S6, S12), the attempts, the
// counts and the log of a failure for good.
func (r *Engine) conclude(j *Job, v Verdict) {
	id := j.D.ID
	switch k := v.Out; {
	case k == Acked:
		r.seen.add(id)
		r.processedStamp(j)
		if j.D.Attempt > 1 {
			r.tries.succeed(id)
		}
	case k == Retried:
		r.sub.Counts.Retried.Add(1)
	case k.ForGood():
		j.err = v.Err
		if r.tries.giveUp(id) {
			r.sub.Counts.Failed.Add(1) // once per message
		}
		if v.deadLettered {
			r.sub.Counts.DeadLettered.Add(1)
		}
		if k == Parked {
			r.tries.succeed(id) // a release gives it its attempts afresh
		}
		r.Obs.messageFailed(j, v.deadLettered)
	}
}

// processedBefore reports whether the message id was processed already:
// in this Receive (S6), or, with parking, by the release of a park that
// has ended since (its ack may have been lost).
func (r *Engine) processedBefore(id string) bool {
	return r.seen.contains(id) || (r.park != nil && r.park.ReleasedLately(id))
}

// logFailure is the attribute set of a failure for good's log.
func logFailure(j *Job, deadLettered bool) []slog.Attr {
	return []slog.Attr{
		slog.String("key", j.D.Key), slog.String("message_id", j.D.ID), slog.Int("attempt", j.D.Attempt),
		slog.Any("error", j.err), slog.Bool("dead_lettered", deadLettered),
	}
}

// sequenced reports whether j's stamp is checked in this Receive.
func (r *Engine) sequenced(j *Job) bool {
	return r.seqs != nil && r.sub.Ordered && j.D.Key != "" && j.D.Seq != 0
}

// checkSequence is the sequence check of j, just before the handler call:
// it reports whether j is a copy of a message processed already, and
// returns the gap before it, newly found, for the call path to report to
// the WithGapHandler callback once j is settled. It counts and logs both,
// and a number that may run a second time, since a bound of the window
// forgot it (S12).
func (r *Engine) checkSequence(j *Job, now time.Time) (bool, *Gap) {
	if !r.sequenced(j) {
		return false, nil
	}
	d := &j.D
	res, first := r.seqs.CheckFirst(d.Key, ordering.Stamp{Producer: d.Producer, Seq: d.Seq}, d.ID, j.Redriven, now)
	ctx := handlerContext{Context: j.Ctx, life: r.handlerCtx}
	if res.Copy && r.Cfg.DedupWindow > 0 {
		r.sub.Counts.Duplicates.Add(1)
		r.Obs.sequenceDuplicate(ctx, res.FirstCopy, d.Key, d.Producer, d.Seq, d.ID)
		return true, nil
	}
	if res.Uncertain {
		r.sub.Counts.Rerun.Add(1)
		r.Obs.sequenceRerun(ctx, d.Key, d.Producer, d.Seq, d.ID)
	}
	start := first && res.GapFrom == 0 && startsLate(d.Seq)
	if start {
		// Silence is no start: numbers before this one were never seen
		// here, and the producer began at 1.
		epoch, _ := ordering.SplitSeq(d.Seq)
		res.GapFrom, res.GapTo = ordering.MakeSeq(epoch, 1), d.Seq-1
	}
	if res.GapFrom == 0 {
		return false, nil
	}
	g := &Gap{Key: d.Key, Producer: d.Producer, From: res.GapFrom, To: res.GapTo, MessageID: d.ID, Seq: d.Seq}
	// A gap is certain only where this process held the key's earlier
	// messages: the service moves a key only when none of its messages
	// is outstanding, so a key that had nothing here may have been on
	// another client, however briefly, and its numbers processed there.
	// A pair new to the window has no earlier messages here; and on a
	// server that redelivers out of order the numbers may still come.
	g.Uncertain = first || j.fresh || r.anyOrder
	if g.Uncertain {
		r.sub.Counts.UncertainGaps.Add(1)
	} else {
		r.sub.Counts.Gaps.Add(1)
	}
	if start {
		// Counted and logged, not told: WithGapHandler hears of numbers
		// missing between two this Receive saw.
		r.Obs.sequenceStart(ctx, d.Key, d.Producer, res.GapFrom, res.GapTo)
		return false, nil
	}
	r.Obs.sequenceGap(ctx, d.Key, d.Producer, res.GapFrom, res.GapTo, g.Uncertain)
	return false, g
}

// processedStamp records j's stamp as processed, before j is acked, so
// that a copy that comes after the ack is known.
func (r *Engine) processedStamp(j *Job) {
	if r.sequenced(j) {
		r.seqs.Done(j.D.Key, ordering.Stamp{Producer: j.D.Producer, Seq: j.D.Seq}, time.Now())
	}
}

// reportGap tells the WithGapHandler callback about g. A panic in the
// callback is recovered and logged.
func (r *Engine) reportGap(g Gap) {
	if r.Cfg.OnGap == nil {
		return
	}
	defer r.recoverCallback("gap handler")
	r.Cfg.OnGap(g)
}

// DeadLettered reports whether the service will forward j's message to
// the dead-letter topic rather than deliver it again if j is nacked now.
func (r *Engine) DeadLettered(j *Job) bool {
	return r.sub.DeadLetterAttempts > 0 && j.deliveryAttempt() >= r.sub.DeadLetterAttempts
}

// Backoff is the wait before the next call of a message after its
// failures-th counted failure: WithBackoff's min, doubling up to its max.
func (r *Engine) Backoff(failures int) time.Duration {
	return backoff.Doubling(r.Cfg.MinBackoff, r.Cfg.MaxBackoff, failures)
}

// reportError tells the WithErrorHandler callback about a failed call. A
// panic in the callback is recovered and logged: it must not leave the
// message unsettled (S11).
func (r *Engine) reportError(j *Job, err error) {
	if r.Cfg.OnError == nil {
		return
	}
	defer r.recoverCallback("error handler")
	r.Cfg.OnError(&j.D, err)
}

// Parked settles jobs, moved to the parking topic, as parked: acked, and
// counted in Stats.Parked. Every door that parks calls it.
func (r *Engine) Parked(fx *Effects, jobs ...*Job) {
	for _, j := range jobs {
		fx.Add(j, Parked)
	}
	r.sub.Counts.Parked.Add(int64(len(jobs)))
}

// Stopping is closed when the engine stops: Receive's ctx ended, pulling
// failed, or a push endpoint's Close began.
func (r *Engine) Stopping() <-chan struct{} { return r.stopping }

// take counts j, which is queued, and starts the watch if the window is
// now half full.
func (r *Engine) take(j *Job) {
	rm := &r.room
	j.counted = true
	rm.msgs.Add(1)
	rm.bytes.Add(j.size)
	if rm.pressed(0) && rm.watching.CompareAndSwap(false, true) {
		rm.watch.Store(r.clock.after(roomCheck, r.checkRoom))
	}
}

// checkRoom is the watch: it nacks the queued deliveries past the backlog
// of every stuck key, and looks again after roomCheck while the window is
// still half full.
func (r *Engine) checkRoom() {
	rm := &r.room
	if r.Stopped() {
		return
	}
	now := time.Now()
	var fx Effects
	r.Lanes.each(func(l *Lane) { l.shed(now, &fx) })
	for _, s := range fx.settle {
		r.settle(s.j, s.out)
	}
	if rm.pressed(0) {
		rm.watch.Store(r.clock.after(roomCheck, r.checkRoom))
		return
	}
	rm.watching.Store(false)
	if rm.pressed(0) && rm.watching.CompareAndSwap(false, true) { // it filled again meanwhile
		rm.watch.Store(r.clock.after(roomCheck, r.checkRoom))
	}
}

// stopWatch stops the watch at shutdown.
func (r *Engine) stopWatch() {
	if t := r.room.watch.Load(); t != nil {
		r.clock.stop(t)
	}
}

// Survey fills in what the running Receive holds now: the counts, the held
// keys, and, if ranked, the busiest partitions and the top keys.
func (r *Engine) Survey(st *Snapshot, now time.Time, ranked bool) {
	c := &r.census
	c.mu.Lock()
	defer c.mu.Unlock()
	if ranked && c.index == nil {
		c.index = make([]int32, r.Cfg.Partitions)
	}
	backlog := ranking[KeyStats]{before: moreBacklog}
	aged := ranking[KeyStats]{before: older}
	var oldest time.Time
	r.Lanes.each(func(l *Lane) {
		q := l.Queue.Len()
		st.Queued += q
		if l.Running != nil {
			st.Running++
		}
		if l.trouble != nil {
			st.Held = append(st.Held, l.heldKey())
		}
		o := l.oldest()
		if !o.IsZero() && (oldest.IsZero() || o.Before(oldest)) {
			oldest = o
		}
		if l.Key == "" {
			return // not pinned to a partition, and no key to rank
		}
		st.Keys++
		if !ranked || (q == 0 && l.Running == nil) {
			return
		}
		k := KeyStats{
			Key: l.Key, Partition: l.partition(), Queued: q, Running: l.Running != nil,
			Age: now.Sub(o), Calls: l.stats.calls, Busy: l.stats.busy, Held: l.trouble != nil,
		}
		if k.Running {
			k.RunningFor = now.Sub(l.busySince)
		}
		c.add(k)
		backlog.offer(k)
		aged.offer(k)
	})
	sortHeld(st.Held)
	if !oldest.IsZero() {
		st.OldestAge = now.Sub(oldest)
	}
	if !ranked {
		return
	}
	st.TopBacklog, st.TopAge = backlog.items, aged.items
	st.ActivePartitions = len(c.parts)
	busiest := ranking[PartitionStats]{before: busier}
	for _, p := range c.parts {
		busiest.offer(p)
	}
	st.Partitions = busiest.items
	for _, p := range c.parts {
		c.index[p.Partition] = 0
	}
	c.parts = c.parts[:0]
}

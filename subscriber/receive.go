package subscriber

import (
	"context"
	"os"
	"runtime/debug"
	"time"

	"cloud.google.com/go/pubsub/v2"

	"github.com/keyorder/keyorder/ordering"
	"github.com/keyorder/keyorder/subscriber/internal/engine"
	"github.com/keyorder/keyorder/subscriber/internal/seqwindow"
	"github.com/keyorder/keyorder/workers"
)

// receiver is the state of one Receive call.
type receiver struct {
	sub  engineFacts // the subscription's
	h    Handler
	cfg  *engineConfig
	pool *workers.Pool
	// handlerCtx outlives Receive's ctx by the drain timeout (S7).
	handlerCtx     context.Context
	cancelHandlers context.CancelFunc
	stopping       chan struct{}     // closed when Receive's ctx ends or pulling fails
	lanes          lanes             // the keys with work or a hold
	seen           processed         // recently processed message IDs (S6)
	seqs           *seqwindow.Window // recently active producers' sequences, per key; nil without checks
	anyOrder       bool              // the server may redeliver out of order (WithUnorderedRedelivery)
	tries          attempts          // calls and failures of failing messages
	room           room              // S10
	clock          clock             // retry and hold timers
	confirm        *confirmer        // exactly-once subscriptions only: watches ack answers
	obs            *recorder         // metrics and logs (observe.go)
	census         census            // scratch for Stats (lane_census.go)
	park           parkingHooks      // with WithParking, else nil (lane_park.go)
	ending         ending            // what the shutdown nacks once the streams close (shutdown.go)
}

// newReceiver makes the engine of one Receive, or of a push endpoint, of
// a subscription with the facts sub, running h by cfg.
func newReceiver(ctx context.Context, cfg *engineConfig, sub engineFacts, h Handler) (*receiver, error) {
	pool, err := workers.New(cfg.Partitions,
		workers.WithConcurrency(cfg.Workers),
		// A lane has at most one turn in the pool, so this only bounds
		// the lanes of one partition; a submit must never wait for it.
		workers.WithQueueSize(maxPoolQueue))
	if err != nil {
		return nil, err
	}
	handlerCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	r := &receiver{
		sub:            sub,
		h:              h,
		cfg:            cfg,
		pool:           pool,
		handlerCtx:     handlerCtx,
		cancelHandlers: cancel,
		stopping:       make(chan struct{}),
		seen:           newProcessed(cfg.DedupWindow),
		tries:          newAttempts(),
		anyOrder:       cfg.AnyOrder || os.Getenv("PUBSUB_EMULATOR_HOST") != "",
		ending:         ending{born: time.Now()},
	}
	if cfg.SeqWindow > 0 {
		r.seqs = seqwindow.New(cfg.SeqWindow)
		if r.anyOrder {
			r.seqs.AnyOrder()
		}
	}
	r.room.init(cfg, sub.DeadLetterAttempts)
	r.obs = newRecorder(cfg, sub.Name, r.gauges)
	return r, nil
}

// start starts what runs beside the lanes: on an exactly-once
// subscription, the watch of ack answers (exactlyonce.go).
func (r *receiver) start() {
	if r.sub.ExactlyOnce {
		r.confirm = &confirmer{}
		r.confirm.start(r)
	}
}

// setParking gives the lanes and the call path their hooks into parking,
// once it has started, before the first delivery.
func (r *receiver) setParking(p parkingHooks) { r.park = p }

// finish waits, once the official Receive has returned and parking has
// stopped, for what start started, and returns the error Receive returns.
func (r *receiver) finish(pullErr error) error {
	defer r.ending.end()
	if r.confirm != nil {
		r.confirm.stop(r.ending.left()) // ShutdownBound
	}
	return pullErr
}

// maxPoolQueue is the largest queue the worker pool allows.
const maxPoolQueue = 1 << 20

// deliver is the official client's callback. On an ordered subscription it
// is called one message at a time per key, in order, so queueing in call
// order keeps the key's order in its lane; where the server may send a
// key's messages out of order, their stamps put them back in order
// (place). It never waits: a callback that blocked would hold the
// official client's flow control, and with it every other key.
func (r *receiver) deliver(ctx context.Context, m *pubsub.Message) {
	r.sub.Counts.Received.Add(1)
	j := r.arrived(ctx, m)
	if r.processedBefore(m.ID) {
		// S6: processed already; acking again runs nothing. The call path
		// checks again before the call; this spares the delivery a turn.
		r.settle(j, engine.Deduplicated)
		return
	}
	if r.sub.Admits != nil && !r.sub.Admits(m) {
		r.settle(j, engine.Skipped) // published after Replay started
		return
	}
	var fx effects
	l := r.lanes.with(r, m.OrderingKey, func(l *lane) {
		if out := l.accept(j, j.received); out != engine.Queued {
			fx.add(j, out)
		}
		if !l.active {
			l.next(&fx) // a turn if it has something to run, else it may go
		}
	})
	r.apply(l, &fx)
}

// settle acks or nacks every delivery of j's message, once (S11), and
// counts it. At shutdown, a nack is left to the official client, which
// sends it once its streams are closed (shutdown.go).
func (r *receiver) settle(j *job, out engine.Outcome) {
	if out == engine.Joined || out == engine.Queued || !j.settled.CompareAndSwap(false, true) {
		return
	}
	switch {
	case out.Acks():
		for _, m := range j.stale {
			m.Ack()
		}
		r.ack(j, out == engine.Acked)
		r.ending.acked()
	case out == engine.Shutdown && r.ending.hold(j):
	default:
		for _, m := range j.stale {
			m.Nack()
		}
		j.msg.Nack()
	}
	r.room.give(j)
	r.count(j, out)
}

// count records how j was settled, in Stats and the metrics.
func (r *receiver) count(j *job, out engine.Outcome) {
	if out == engine.Failed && r.deadLettered(j) {
		out = engine.DeadLettered // the service forwards it
	}
	r.obs.settled(out)
	r.sub.Counts.Settled[out].Add(1)
}

// apply does what a change to l decided, once its shard's mutex is
// released: settlements first, in order, then the next turn, then user
// callbacks, last, so that one that panics or exits the goroutine has
// nothing left undone.
func (r *receiver) apply(l *lane, fx *effects) {
	for _, s := range fx.settle {
		r.settle(s.j, s.out)
	}
	if fx.turn {
		if err := r.pool.SubmitTask(context.Background(), l.key, l); err != nil {
			// The pool is closed: shutting down (S7).
			l.Drop()
		}
	}
	for _, ev := range fx.events {
		r.emit(ev)
	}
}

// emit logs a key event and tells the WithKeyEvents callback.
func (r *receiver) emit(ev KeyEvent) {
	r.obs.keyEvent(ev)
	if r.cfg.OnKeyEvent == nil {
		return
	}
	defer r.recoverCallback("key event callback")
	r.cfg.OnKeyEvent(ev)
}

// recoverCallback recovers a panic in a user callback and logs it: the
// callback's caller has settled what it had to already.
func (r *receiver) recoverCallback(what string) {
	if v := recover(); v != nil {
		r.obs.callbackPanicked(what, v, debug.Stack())
	}
}

func (r *receiver) stopped() bool {
	select {
	case <-r.stopping:
		return true
	default:
		return false
	}
}

// idle reports whether the receiver holds nothing: no delivery queued,
// running or waiting for a retry, and no key waiting for a message it sent
// back.
func (r *receiver) idle() bool {
	return r.room.msgs.Load() == 0 && r.lanes.idle()
}

// shutdown stops the receiver (S7): deliveries queued or waiting for a
// retry are held for the official client's nack, running handlers finish
// within the drain timeout and are then cancelled, and every goroutine the
// receiver started exits.
func (r *receiver) shutdown() {
	r.ending.begin(r.cfg.DrainTimeout)
	close(r.stopping)
	r.stopWatch()
	// Take what waits in the lanes. A lane with a turn in the pool is
	// settled by the turn's Drop below; one with a handler running, when
	// the handler returns.
	var fx effects
	r.lanes.each(func(l *lane) { l.drain(&fx, engine.Shutdown) })
	for _, s := range fx.settle {
		r.settle(s.j, s.out)
	}
	drain, cancel := context.WithDeadline(context.Background(), r.ending.drainEnd(r.cfg.DrainTimeout))
	if r.pool.Stop(drain) != nil {
		r.cancelHandlers()
		_ = r.pool.Stop(context.Background())
	}
	cancel()
	r.clock.wg.Wait()
	r.obs.close()
	if r.park != nil {
		r.park.shutdown()
	}
}

// flushAcks waits until the acks handed to the official client have been
// sent, before its streams close: on an exactly-once subscription, until
// the service has answered them (within the shutdown's time); otherwise
// until ackFlush has passed since the last one.
func (r *receiver) flushAcks() {
	if r.confirm != nil {
		r.confirm.flush(r.ending.left())
		return
	}
	since := time.Since(r.ending.born) - time.Duration(r.ending.lastAck.Load())
	if r.ending.lastAck.Load() == 0 || since >= ackFlush {
		return
	}
	t := time.NewTimer(ackFlush - since)
	defer t.Stop()
	<-t.C
}

// nackLeftovers nacks the deliveries held for the official client's nack,
// once it has returned: it has nacked them on the service already, and
// this keeps its books.
func (r *receiver) nackLeftovers() {
	e := &r.ending
	e.mu.Lock()
	e.closed = true
	held, cut := e.held, e.cut
	e.held = nil
	e.mu.Unlock()
	nack := func() {
		for _, m := range held {
			m.Nack()
		}
	}
	if cut {
		// The official client nacks under a lock it holds for its own
		// nack request, up to nackTimeout: these wait for it apart.
		go nack()
		return
	}
	nack()
}

// awaitPull waits for the official Receive, which the shutdown has
// cancelled, to return, and returns its error; it gives up when the
// shutdown's time is up (see ShutdownBound), and returns nil then.
func (r *receiver) awaitPull(pulled <-chan error) error {
	select {
	case err := <-pulled:
		return err
	case <-r.ending.deadline().Done():
		r.obs.shutdownCut()
		r.ending.mu.Lock()
		r.ending.cut = true
		r.ending.mu.Unlock()
		return nil
	}
}

// arrived makes the job of m, delivered by the service to Receive or to
// the push endpoint, and counts and logs a stamp it refused.
func (r *receiver) arrived(ctx context.Context, m *pubsub.Message) *job {
	j := newJob(ctx, m, r.cfg.StampKeys)
	if j.stamp.err != nil {
		r.unverified(j)
	}
	return j
}

// checkReleased verifies the stamp of j, a parked copy m about to run in
// a release: its Delivery was read from m's attributes, which still hold
// the signature. A stamp that does not verify leaves j unstamped.
func (r *receiver) checkReleased(j *job, m *pubsub.Message) {
	if j.d.Seq == 0 {
		return
	}
	j.stamp.sig = m.Attributes[ordering.SignatureAttribute]
	k := r.cfg.StampKeys
	if k == nil {
		return
	}
	st := ordering.Stamp{Producer: j.d.Producer, Seq: j.d.Seq}
	if err := k.Verify(m.Attributes, j.d.Key, st, j.d.Data); err != nil {
		j.d.Producer, j.d.Seq = "", 0
		j.stamp = stampNote{refused: st, err: err}
		r.unverified(j)
	}
}

// unverified counts and logs j, whose stamp's signature failed.
func (r *receiver) unverified(j *job) {
	r.sub.Counts.Unverified.Add(1)
	r.obs.stampUnverified(j.ctxOr(), j.d.Key, j.stamp.refused, j.d.ID, j.stamp.err)
}

// ack acks the newest delivery of j's message: on an exactly-once
// subscription, with its answer watched; ran says the handler ran for it.
func (r *receiver) ack(j *job, ran bool) {
	if r.confirm != nil {
		p := pendingAck{id: j.d.ID, ran: ran}
		if r.sequenced(j) {
			p.key, p.stamp = j.d.Key, ordering.Stamp{Producer: j.d.Producer, Seq: j.d.Seq}
		}
		r.confirm.ack(p, j.msg)
		return
	}
	j.msg.Ack()
}

// gauges is the survey of the running Receive the gauges report.
func (r *receiver) gauges() (held, queued int, oldest time.Duration) {
	var st engineSnapshot
	r.survey(&st, time.Now(), false)
	return len(st.Held), st.Queued, st.OldestAge
}

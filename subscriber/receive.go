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

// Receive calls h for each message of the subscription until ctx ends,
// then shuts down, and returns nil; it returns early with the official
// client's error if receiving fails for good.
//
//   - A key's deliveries run one at a time, in the order they arrive, on
//     the key's partition; with [WithUnorderedRedelivery], a stamped
//     delivery waiting to run goes before the waiting ones of its
//     producer with higher numbers. Different keys run in parallel, up to
//     [WithWorkers] handlers at once (S3).
//   - A message is acked only after h has returned nil for it (S4).
//   - When h fails or panics, the message is called again after a
//     backoff, while its key waits without holding a worker; its key's
//     later deliveries wait behind it. When it fails for good, it is
//     nacked with every delivery of its key queued behind it, unrun, and
//     the key is held until the service brings it back, so that no later
//     message of the key runs before it has succeeded. Other keys go on
//     (S5, S9).
//   - With [WithParking], a message that fails for good parks its key
//     instead: it and the key's later messages go to the parking topic
//     until [Subscription.Release]. Receive first replays the parking
//     control log, and returns its error if it cannot follow it; it
//     carries out the release requests recorded there
//     ([Subscription.RequestRelease]), through h.
//   - A key queues at most [WithKeyBacklog] deliveries once the
//     subscription holds half its flow-control window; past that, its
//     deliveries are nacked, so that a slow or failing key cannot starve
//     the others (S10).
//   - A message processed earlier in this Receive that comes back, as part
//     of a redelivered tail or after a lost ack, is acked without calling h
//     (S6, [WithDedupWindow]).
//   - Every delivery is acked or nacked exactly once, whatever h does
//     (S11).
//   - When ctx ends, Receive stops pulling, nacks the deliveries queued and
//     not started, lets running handlers finish until [WithDrainTimeout],
//     then cancels their context and waits for them. It returns after every
//     goroutine it started has exited (S7).
//
// Only one Receive runs at a time on a Subscription; a second one returns
// [ErrReceiving].
func (s *Subscription) Receive(ctx context.Context, h Handler) error {
	switch {
	case s == nil:
		return invalid("Receive on a nil Subscription")
	case h == nil:
		return invalid("Receive with nil handler")
	case s.push.endpoint != "":
		return invalid("Receive on %s, a push subscription: serve its PushHandler", s.name)
	}
	if !s.receiving.CompareAndSwap(false, true) {
		return ErrReceiving
	}
	defer s.receiving.Store(false)

	r, err := newReceiver(ctx, s, h)
	if err != nil {
		return err
	}
	defer r.cancelHandlers()
	p, ctx, err := r.start(ctx)
	if ctx == nil {
		return err
	}
	s.parkNow.Store(p)
	defer s.parkNow.Store(nil)
	s.current.Store(r)
	defer s.current.Store(nil)

	official := s.client.Subscriber(s.name)
	official.ReceiveSettings = s.cfg.receive
	official.ReceiveSettings.ShutdownOptions = &pubsub.ShutdownOptions{
		Behavior: pubsub.ShutdownBehaviorNackImmediately, Timeout: nackTimeout,
	}
	// The official Receive outlives ctx until the shutdown has drained
	// (see shutdown).
	pullCtx, stopPulling := context.WithCancel(context.WithoutCancel(ctx))
	defer stopPulling()
	pulled := make(chan error, 1)
	go func() { pulled <- official.Receive(pullCtx, r.deliver) }()

	var pullErr error
	select {
	case <-ctx.Done():
	case pullErr = <-pulled:
		pulled = nil
	}
	r.shutdown()
	if pulled != nil {
		r.flushAcks()
		stopPulling()
		pullErr = r.awaitPull(pulled)
	}
	r.nackLeftovers()
	if p != nil {
		pullErr = p.stop(pullErr)
	}
	return r.finish(pullErr)
}

// receiver is the state of one Receive call.
type receiver struct {
	s    *Subscription
	h    Handler
	cfg  *config
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

func newReceiver(ctx context.Context, s *Subscription, h Handler) (*receiver, error) {
	pool, err := workers.New(s.cfg.partitions,
		workers.WithConcurrency(s.cfg.workers),
		// A lane has at most one turn in the pool, so this only bounds
		// the lanes of one partition; a submit must never wait for it.
		workers.WithQueueSize(maxPoolQueue))
	if err != nil {
		return nil, err
	}
	handlerCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	r := &receiver{
		s:              s,
		h:              h,
		cfg:            &s.cfg,
		pool:           pool,
		handlerCtx:     handlerCtx,
		cancelHandlers: cancel,
		stopping:       make(chan struct{}),
		seen:           newProcessed(s.cfg.dedupWindow),
		tries:          newAttempts(),
		anyOrder:       s.cfg.anyOrder || os.Getenv("PUBSUB_EMULATOR_HOST") != "",
		ending:         ending{born: time.Now()},
	}
	if s.cfg.seqWindow > 0 {
		r.seqs = seqwindow.New(s.cfg.seqWindow)
		if r.anyOrder {
			r.seqs.AnyOrder()
		}
	}
	r.room.init(&s.cfg, s.deadLetterAttempts)
	r.obs = newRecorder(s, r.gauges)
	return r, nil
}

// start starts what runs beside the lanes: parking, which first catches
// up with its control log (park.go), and the watch of ack answers on an
// exactly-once subscription (exactlyonce.go). It returns the parking, nil
// without WithParking, for Receive to stop once the official Receive has
// returned, and the context Receive must pull with, or a nil one, with
// the error or with nil if ctx ended meanwhile, when Receive must return
// at once; nothing it started then runs on.
func (r *receiver) start(ctx context.Context) (*parking, context.Context, error) {
	var p *parking
	if r.s.parking != nil {
		var err error
		if p, ctx, err = startParking(ctx, r); ctx == nil { // sets r.park
			return nil, nil, err
		}
	}
	if r.s.exactlyOnce {
		r.confirm = &confirmer{}
		r.confirm.start(r)
	}
	return p, ctx, nil
}

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
	r.s.counts.received.Add(1)
	j := r.arrived(ctx, m)
	if r.processedBefore(m.ID) {
		// S6: processed already; acking again runs nothing. The call path
		// checks again before the call; this spares the delivery a turn.
		r.settle(j, engine.Deduplicated)
		return
	}
	if !r.s.replay.admits(m) {
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
	r.s.counts.settled[out].Add(1)
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
	if r.cfg.onKeyEvent == nil {
		return
	}
	defer r.recoverCallback("key event callback")
	r.cfg.onKeyEvent(ev)
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
	r.ending.begin(r.cfg.drainTimeout)
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
	drain, cancel := context.WithDeadline(context.Background(), r.ending.drainEnd(r.cfg.drainTimeout))
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
	j := newJob(ctx, m, r.cfg.stampKeys)
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
	k := r.cfg.stampKeys
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
	r.s.counts.unverified.Add(1)
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
	var st Stats
	r.survey(&st, time.Now(), false)
	return len(st.Held), st.Queued, st.OldestAge
}

package engine

import (
	"context"
	"os"
	"runtime/debug"
	"time"

	"cloud.google.com/go/pubsub/v2"

	"github.com/keyorder/keyorder/ordering"
	"github.com/keyorder/keyorder/subscriber/internal/seqwindow"
	"github.com/keyorder/keyorder/workers"
)

// Engine is the state of one Receive call.
type Engine struct {
	sub  Facts // the subscription's
	h    Handler
	Cfg  *Config
	pool *workers.Pool
	// handlerCtx outlives Receive's ctx by the drain timeout (S7).
	handlerCtx     context.Context
	CancelHandlers context.CancelFunc
	stopping       chan struct{}     // closed when Receive's ctx ends or pulling fails, or by StopCalls
	Lanes          lanes             // the keys with work or a hold
	seen           processed         // recently processed message IDs (S6)
	seqs           *seqwindow.Window // recently active producers' sequences, per key; nil without checks
	anyOrder       bool              // the server may redeliver out of order (WithUnorderedRedelivery)
	tries          attempts          // calls and failures of failing messages
	room           room              // S10
	clock          clock             // retry and hold timers
	confirm        *confirmer        // exactly-once subscriptions only: watches ack answers
	Obs            *recorder         // metrics and logs (observe.go)
	census         census            // scratch for Stats (lane_census.go)
	park           Parking           // with WithParking, else nil (lane_park.go)
	Ending         ending            // what the shutdown nacks once the streams close (shutdown.go)
}

// New makes the engine of one Receive, or of a push endpoint, of
// a subscription with the facts sub, running h by cfg.
func New(ctx context.Context, cfg *Config, sub Facts, h Handler) (*Engine, error) {
	pool, err := workers.New(cfg.Partitions,
		workers.WithConcurrency(cfg.Workers),
		// A lane has at most one turn in the pool, so this only bounds
		// the lanes of one partition; a submit must never wait for it.
		workers.WithQueueSize(maxPoolQueue))
	if err != nil {
		return nil, err
	}
	handlerCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	r := &Engine{
		sub:            sub,
		h:              h,
		Cfg:            cfg,
		pool:           pool,
		handlerCtx:     handlerCtx,
		CancelHandlers: cancel,
		stopping:       make(chan struct{}),
		seen:           newProcessed(cfg.DedupWindow),
		tries:          newAttempts(),
		anyOrder:       cfg.AnyOrder || os.Getenv("PUBSUB_EMULATOR_HOST") != "",
		Ending:         ending{born: time.Now()},
	}
	if cfg.SeqWindow > 0 {
		r.seqs = seqwindow.New(cfg.SeqWindow)
		if r.anyOrder {
			r.seqs.AnyOrder()
		}
	}
	r.room.init(cfg, sub.DeadLetterAttempts)
	r.Obs = newRecorder(cfg, sub.Name, r.gauges)
	return r, nil
}

// Start starts what runs beside the lanes: on an exactly-once
// subscription, the watch of ack answers (exactlyonce.go).
func (r *Engine) Start() {
	if r.sub.ExactlyOnce {
		r.confirm = &confirmer{}
		r.confirm.start(r)
	}
}

// SetParking gives the lanes and the call path their hooks into parking,
// once it has started, before the first delivery.
func (r *Engine) SetParking(p Parking) { r.park = p }

// ParkingDoor returns r's parking door, for the door that starts parking
// (Receive, the push endpoint) to give it (parkingdoor.go).
func (r *Engine) ParkingDoor() *ParkingDoor { return &ParkingDoor{r: r} }

// Finish waits, once the official Receive has returned and parking has
// stopped, for what start started, and returns the error Receive returns.
func (r *Engine) Finish(pullErr error) error {
	defer r.Ending.end()
	if r.confirm != nil {
		r.confirm.stop(r.Ending.left()) // ShutdownBound
	}
	return pullErr
}

// maxPoolQueue is the largest queue the worker pool allows.
const maxPoolQueue = 1 << 20

// Deliver is the official client's callback. On an ordered subscription it
// is called one message at a time per key, in order, so queueing in call
// order keeps the key's order in its lane; where the server may send a
// key's messages out of order, their stamps put them back in order
// (place). It never waits: a callback that blocked would hold the
// official client's flow control, and with it every other key.
func (r *Engine) Deliver(ctx context.Context, m *pubsub.Message) {
	r.sub.Counts.Received.Add(1)
	j := r.arrived(ctx, m)
	if r.processedBefore(m.ID) {
		// S6: processed already; acking again runs nothing. The call path
		// checks again before the call; this spares the delivery a turn.
		r.settle(j, Deduplicated)
		return
	}
	if r.sub.Admits != nil && !r.sub.Admits(m) {
		r.settle(j, Skipped) // published after Replay started
		return
	}
	var fx Effects
	l := r.Lanes.with(r, m.OrderingKey, func(l *Lane) {
		if out := l.accept(j, j.received); out != Queued {
			fx.Add(j, out)
		}
		if !l.Active {
			l.next(&fx) // a turn if it has something to run, else it may go
		}
	})
	r.apply(l, &fx)
}

// settle acks or nacks every delivery of j's message, once (S11), and
// counts it. At shutdown, a nack is left to the official client, which
// sends it once its streams are closed (shutdown.go).
func (r *Engine) settle(j *Job, out Outcome) {
	if out == Joined || out == Queued || !j.settled.CompareAndSwap(false, true) {
		return
	}
	switch {
	case out.Acks():
		for _, m := range j.stale {
			m.Ack()
		}
		r.ack(j, out == Acked)
		r.Ending.acked()
	case out == Shutdown && r.Ending.hold(j):
	default:
		for _, m := range j.stale {
			m.Nack()
		}
		j.Msg.Nack()
	}
	r.room.give(j)
	r.Count(j, out)
}

// Count records how j was settled, in Stats and the metrics.
func (r *Engine) Count(j *Job, out Outcome) {
	if out == Failed && r.DeadLettered(j) {
		out = DeadLettered // the service forwards it
	}
	r.Obs.settled(out)
	r.sub.Counts.Settled[out].Add(1)
}

// apply does what a change to l decided, once its shard's mutex is
// released: settlements first, in order, then the next turn, then user
// callbacks, last, so that one that panics or exits the goroutine has
// nothing left undone.
func (r *Engine) apply(l *Lane, fx *Effects) {
	for _, s := range fx.settle {
		r.settle(s.j, s.out)
	}
	if fx.turn {
		if err := r.pool.SubmitTask(context.Background(), l.Key, l); err != nil {
			// The pool is closed: shutting down (S7).
			l.Drop()
		}
	}
	for _, ev := range fx.events {
		r.Emit(ev)
	}
}

// Emit logs a key event and tells the WithKeyEvents callback.
func (r *Engine) Emit(ev KeyEvent) {
	r.Obs.keyEvent(ev)
	if r.Cfg.OnKeyEvent == nil {
		return
	}
	defer r.recoverCallback("key event callback")
	r.Cfg.OnKeyEvent(ev)
}

// recoverCallback recovers a panic in a user callback and logs it: the
// callback's caller has settled what it had to already.
func (r *Engine) recoverCallback(what string) {
	if v := recover(); v != nil {
		r.Obs.callbackPanicked(what, v, debug.Stack())
	}
}

func (r *Engine) Stopped() bool {
	select {
	case <-r.stopping:
		return true
	default:
		return false
	}
}

// Idle reports whether the receiver holds nothing: no delivery queued,
// running or waiting for a retry, and no key waiting for a message it sent
// back.
func (r *Engine) Idle() bool {
	return r.room.msgs.Load() == 0 && r.Lanes.idle()
}

// Shutdown stops the receiver (S7): deliveries queued or waiting for a
// retry are held for the official client's nack, running handlers finish
// within the drain timeout and are then cancelled, and every goroutine the
// Engine started exits.
func (r *Engine) Shutdown() {
	r.Ending.begin(r.Cfg.DrainTimeout)
	close(r.stopping)
	r.stopWatch()
	// Take what waits in the lanes. A lane with a turn in the pool is
	// settled by the turn's Drop below; one with a handler running, when
	// the handler returns.
	var fx Effects
	r.Lanes.each(func(l *Lane) { l.drain(&fx, Shutdown) })
	for _, s := range fx.settle {
		r.settle(s.j, s.out)
	}
	drain, cancel := context.WithDeadline(context.Background(), r.Ending.DrainEnd(r.Cfg.DrainTimeout))
	if r.pool.Stop(drain) != nil {
		r.CancelHandlers()
		_ = r.pool.Stop(context.Background())
	}
	cancel()
	r.clock.wg.Wait()
	r.Obs.close()
	if r.park != nil {
		r.park.Shutdown()
	}
}

// FlushAcks waits until the acks handed to the official client have been
// sent, before its streams close: on an exactly-once subscription, until
// the service has answered them (within the shutdown's time); otherwise
// until ackFlush has passed since the last one.
func (r *Engine) FlushAcks() {
	if r.confirm != nil {
		r.confirm.flush(r.Ending.left())
		return
	}
	since := time.Since(r.Ending.born) - time.Duration(r.Ending.lastAck.Load())
	if r.Ending.lastAck.Load() == 0 || since >= ackFlush {
		return
	}
	t := time.NewTimer(ackFlush - since)
	defer t.Stop()
	<-t.C
}

// NackLeftovers nacks the deliveries held for the official client's nack,
// once it has returned: it has nacked them on the service already, and
// this keeps its books.
func (r *Engine) NackLeftovers() {
	e := &r.Ending
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

// AwaitPull waits for the official Receive, which the shutdown has
// cancelled, to return, and returns its error; it gives up when the
// shutdown's time is up (see ShutdownBound), and returns nil then.
func (r *Engine) AwaitPull(pulled <-chan error) error {
	select {
	case err := <-pulled:
		return err
	case <-r.Ending.Deadline().Done():
		r.Obs.shutdownCut()
		r.Ending.mu.Lock()
		r.Ending.cut = true
		r.Ending.mu.Unlock()
		return nil
	}
}

// CallInLane runs j, a push request's job, through the call path on a
// goroutine of its own, its key's lane showing it running meanwhile, and
// returns the verdict: a handler that exits its goroutine still gets its
// request answered (S11). The handler's context ends with ctx, as the
// service stops waiting for the answer then, or with the drain.
func (r *Engine) CallInLane(ctx context.Context, j *Job) Verdict {
	life, cancel := context.WithCancel(r.handlerCtx)
	defer cancel()
	defer context.AfterFunc(ctx, cancel)()
	j.life = life
	answer := make(chan Verdict, 1)
	go r.Call(j, laneCall{l: r.Lanes.pushing(r, j), answer: answer})
	return <-answer
}

// ArrivePush makes the job of m, pushed to the push endpoint, and counts
// it received. Its retries are the service's pushes (S5): the service's
// backoff spaces them.
func (r *Engine) ArrivePush(ctx context.Context, m *pubsub.Message) *Job {
	r.sub.Counts.Received.Add(1)
	j := r.arrived(ctx, m)
	j.D.DeliveryAttempt = j.deliveryAttempt()
	j.retriesByNack = true
	return j
}

// arrived makes the job of m, delivered by the service to Receive or to
// the push endpoint, and counts and logs a stamp it refused.
func (r *Engine) arrived(ctx context.Context, m *pubsub.Message) *Job {
	j := newJob(ctx, m, r.Cfg.StampKeys)
	if j.Stamp.err != nil {
		r.unverified(j)
	}
	return j
}

// CheckReleased verifies the stamp of j, a parked copy m about to run in
// a release: its Delivery was read from m's attributes, which still hold
// the signature. A stamp that does not verify leaves j unstamped.
func (r *Engine) CheckReleased(j *Job, m *pubsub.Message) {
	if j.D.Seq == 0 {
		return
	}
	j.Stamp.Sig = m.Attributes[ordering.SignatureAttribute]
	k := r.Cfg.StampKeys
	if k == nil {
		return
	}
	st := ordering.Stamp{Producer: j.D.Producer, Seq: j.D.Seq}
	if err := k.Verify(m.Attributes, j.D.Key, st, j.D.Data); err != nil {
		j.D.Producer, j.D.Seq = "", 0
		j.Stamp = stampNote{refused: st, err: err}
		r.unverified(j)
	}
}

// unverified counts and logs j, whose stamp's signature failed.
func (r *Engine) unverified(j *Job) {
	r.sub.Counts.Unverified.Add(1)
	r.Obs.stampUnverified(j.ctxOr(), j.D.Key, j.Stamp.refused, j.D.ID, j.Stamp.err)
}

// ack acks the newest delivery of j's message: on an exactly-once
// subscription, with its answer watched; ran says the handler ran for it.
func (r *Engine) ack(j *Job, ran bool) {
	if r.confirm != nil {
		p := pendingAck{id: j.D.ID, ran: ran}
		if r.sequenced(j) {
			p.key, p.stamp = j.D.Key, ordering.Stamp{Producer: j.D.Producer, Seq: j.D.Seq}
		}
		r.confirm.ack(p, j.Msg)
		return
	}
	j.Msg.Ack()
}

// gauges is the survey of the running Receive the gauges report.
func (r *Engine) gauges() (held, queued int, oldest time.Duration) {
	var st Snapshot
	r.Survey(&st, time.Now(), false)
	return len(st.Held), st.Queued, st.OldestAge
}

// StopCalls closes Stopping, for a push endpoint's Close: the calls
// waiting to run again and parking's waits end.
func (r *Engine) StopCalls() { close(r.stopping) }

// BeginStop begins the Close of a push endpoint: the shutdown's clock
// starts, which bounds its waits for the server (ShutdownBound). It
// returns the drain timeout, and the function that ends the shutdown,
// which Close calls last.
func (r *Engine) BeginStop() (drain time.Duration, end func()) {
	r.Ending.begin(r.Cfg.DrainTimeout)
	return r.Cfg.DrainTimeout, r.Ending.end
}

// CloseMetrics stops the metrics' gauges, once a push endpoint has closed.
func (r *Engine) CloseMetrics() { r.Obs.close() }

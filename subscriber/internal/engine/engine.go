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
	stopping       chan struct{}     // closed when Receive's ctx ends or pulling fails, or by PushDoor.Stop
	Lanes          lanes             // the keys with work or a hold
	seen           processed         // recently processed message IDs (S6)
	seqs           *seqwindow.Window // recently active producers' sequences, per key; nil without checks
	anyOrder       bool              // the server may redeliver out of order (WithUnorderedRedelivery)
	tries          attempts          // calls and failures of failing messages
	room           room              // S10
	clock          clock             // retry and hold timers
	confirm        *confirmer        // exactly-once subscriptions only: watches ack answers
	Obs            *recorder         // metrics and logs (observe.go)
	census         census            // scratch for Stats (census.go)
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

// PushDoor returns r's push door, for the push endpoint that runs on r
// (pushdoor.go); no Receive runs on r then.
func (r *Engine) PushDoor() *PushDoor { return &PushDoor{r: r} }

// Start starts what runs beside the lanes: on an exactly-once
// subscription, the watch of ack answers (confirm.go).
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

// Pull runs the official client's Receive, official, with Deliver as its
// callback, until ctx ends or receiving fails for good, then shuts down in
// the order shutdown.go gives, and returns the official client's error,
// nil if ctx ended first. stop, if set, is called once the official
// Receive has returned, with that error, and returns the error Pull
// returns: parking's stop.
func (r *Engine) Pull(ctx context.Context, official *pubsub.Subscriber, stop func(pullErr error) error) error {
	official.ReceiveSettings = r.Cfg.Receive
	official.ReceiveSettings.ShutdownOptions = &pubsub.ShutdownOptions{
		Behavior: pubsub.ShutdownBehaviorNackImmediately, Timeout: NackTimeout,
	}
	// The official Receive outlives ctx until the shutdown has drained
	// (shutdown.go).
	pullCtx, stopPulling := context.WithCancel(context.WithoutCancel(ctx))
	defer stopPulling()
	pulled := make(chan error, 1)
	go func() { pulled <- official.Receive(pullCtx, r.Deliver) }()

	var pullErr error
	select {
	case <-ctx.Done():
	case pullErr = <-pulled:
		pulled = nil
	}
	r.Shutdown()
	if pulled != nil {
		r.FlushAcks()
		stopPulling()
		pullErr = r.AwaitPull(pulled)
	}
	r.NackLeftovers()
	if stop != nil {
		pullErr = stop(pullErr)
	}
	return r.Finish(pullErr)
}

// maxPoolQueue is the largest queue the worker pool allows.
const maxPoolQueue = 1 << 20

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

// gauges is the survey of the running Receive the gauges report.
func (r *Engine) gauges() (held, queued int, oldest time.Duration) {
	var st Snapshot
	r.Survey(&st, time.Now(), false)
	return len(st.Held), st.Queued, st.OldestAge
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
// failures-th counted failure (Config.Backoff).
func (r *Engine) Backoff(failures int) time.Duration { return r.Cfg.Backoff(failures) }

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

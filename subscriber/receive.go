package subscriber

import (
	"context"
	"errors"
	"runtime/debug"
	"time"

	"cloud.google.com/go/pubsub/v2"

	"github.com/keyorder/keyorder/workers"
)

// Receive calls h for each message of the subscription until ctx ends,
// then shuts down, and returns nil; it returns early with the official
// client's error if receiving fails for good.
//
//   - Deliveries are hashed by key to [WithWorkers] partitions; a key's
//     deliveries run one at a time, in the order they arrive (S3). Keys on
//     different partitions run in parallel.
//   - A message is acked only after h has returned nil for it (S4).
//   - When h fails or panics, the call is retried in place with backoff, up
//     to [WithMaxAttempts] calls. Then the message is nacked, with every
//     delivery of its key queued behind it, unrun, and the key is held: its
//     deliveries are nacked until the failed message comes back, so that
//     no later message of the key runs before it has succeeded (S5). Other
//     keys go on. A message the service will dead-letter instead of
//     redelivering does not hold its key.
//   - A message processed earlier in this Receive that comes back, as part
//     of a redelivered tail or after a lost ack, is acked without calling h
//     (S6, [WithDedupWindow]).
//   - When ctx ends, Receive stops pulling, nacks the deliveries queued and
//     not started, lets running handlers finish until [WithDrainTimeout],
//     then cancels their context and waits for them. It returns after every
//     goroutine it started has exited (S7).
//
// Only one Receive runs at a time on a Subscription; a second one returns
// [ErrReceiving].
func (s *Subscription) Receive(ctx context.Context, h Handler) error {
	if h == nil {
		return errors.New("keyorder/subscriber: Receive with nil handler")
	}
	if !s.receiving.CompareAndSwap(false, true) {
		return ErrReceiving
	}
	defer s.receiving.Store(false)

	popts := []workers.Option{}
	if s.cfg.queueSize > 0 {
		popts = append(popts, workers.WithQueueSize(s.cfg.queueSize))
	}
	pool, err := workers.New(s.cfg.workers, popts...)
	if err != nil {
		return err
	}
	handlerCtx, cancelHandlers := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelHandlers()
	r := &receiver{
		s:          s,
		h:          h,
		pool:       pool,
		handlerCtx: handlerCtx,
		stopping:   make(chan struct{}),
		seen:       newProcessed(s.cfg.dedupWindow),
	}

	official := s.client.Subscriber(s.name)
	official.ReceiveSettings = s.cfg.receive
	// With ShutdownOptions nil, the official Receive returns only once
	// every message it handed over is acked or nacked, and it extends
	// their leases until then: the drain below relies on both.
	official.ReceiveSettings.ShutdownOptions = nil
	pulled := make(chan error, 1)
	go func() { pulled <- official.Receive(ctx, r.deliver) }()

	var pullErr error
	select {
	case <-ctx.Done():
	case pullErr = <-pulled:
		pulled = nil
	}
	close(r.stopping)

	// S7: drop what is queued (its Drop nacks it), let running handlers
	// finish within the drain timeout, then cancel them and wait.
	drain, cancelDrain := context.WithTimeout(context.Background(), s.cfg.drainTimeout)
	if pool.Stop(drain) != nil {
		cancelHandlers()
		_ = pool.Stop(context.Background())
	}
	cancelDrain()
	if pulled != nil {
		pullErr = <-pulled
	}
	return pullErr
}

// receiver is the state of one Receive call.
type receiver struct {
	s          *Subscription
	h          Handler
	pool       *workers.Pool
	handlerCtx context.Context // outlives Receive's ctx by the drain timeout
	stopping   chan struct{}   // closed when Receive's ctx ends or pulling fails
	holds      holds           // keys waiting for a failed message (S5)
	seen       *processed      // recently processed message IDs (S6)
}

// job is one delivery on its way through the pool. It implements
// workers.Task: the pool runs or drops each job exactly once.
type job struct {
	r   *receiver
	msg *pubsub.Message
	d   Delivery
}

// deliver is the official client's callback. On an ordered subscription it
// is called one message at a time per key, in order, so submitting in call
// order keeps the key's order into its partition.
func (r *receiver) deliver(ctx context.Context, m *pubsub.Message) {
	j := &job{r: r, msg: m, d: newDelivery(m)}
	if err := r.pool.SubmitTask(ctx, m.OrderingKey, j); err != nil {
		m.Nack() // shutting down: the service redelivers it
	}
}

// Drop nacks a job the pool discarded before it ran: a key's tail after a
// failure (S5), or what was queued at shutdown (S7).
func (j *job) Drop() { j.msg.Nack() }

// Run processes one delivery on its key's partition.
func (j *job) Run() {
	r, m, key := j.r, j.msg, j.d.Key
	switch {
	case r.seen.contains(m.ID):
		m.Ack() // S6: processed already; acking again runs nothing
		return
	case r.stopped():
		m.Nack() // S7: not started before shutdown
		return
	case r.gated(key) && !r.holds.admit(key, m.ID, time.Now()):
		m.Nack() // S5: an earlier message of the key has not succeeded yet
		return
	}
	if err := r.handle(j); err != nil {
		m.Nack()
		if r.gated(key) && !r.deadLettered(&j.d) {
			now := time.Now()
			r.holds.add(key, m.ID, now.Add(r.s.cfg.redeliveryWait), now)
			r.pool.DropQueued(key) // nack the key's local tail now, unrun
		}
		return
	}
	r.seen.add(m.ID)
	m.Ack() // S4: only after the handler succeeded
}

// gated reports whether a failure of key holds the key: only on an ordered
// subscription, whose service redelivers a nacked message before the rest
// of its key, and only for messages with a key.
func (r *receiver) gated(key string) bool {
	return key != "" && r.s.ordered
}

// deadLettered reports whether the service will forward d's message to the
// dead-letter topic rather than redeliver it after this nack.
func (r *receiver) deadLettered(d *Delivery) bool {
	return r.s.deadLetterAttempts > 0 && d.DeliveryAttempt >= r.s.deadLetterAttempts
}

func (r *receiver) stopped() bool {
	select {
	case <-r.stopping:
		return true
	default:
		return false
	}
}

// handle calls the handler up to the attempt limit, waiting between calls,
// and returns the last error. It gives up early on shutdown.
func (r *receiver) handle(j *job) error {
	cfg := &r.s.cfg
	backoff := cfg.minBackoff
	for attempt := 1; ; attempt++ {
		j.d.Attempt = attempt
		err := r.call(&j.d)
		if err == nil {
			return nil
		}
		if cfg.onError != nil {
			cfg.onError(&j.d, err)
		}
		if attempt >= cfg.maxAttempts || r.stopped() {
			return err
		}
		t := time.NewTimer(backoff)
		select {
		case <-t.C:
		case <-r.stopping:
			t.Stop()
			return err
		}
		backoff = min(2*backoff, cfg.maxBackoff)
	}
}

// call runs the handler once, turning a panic into a *PanicError.
func (r *receiver) call(d *Delivery) (err error) {
	defer func() {
		if v := recover(); v != nil {
			err = &PanicError{Value: v, Stack: debug.Stack()}
		}
	}()
	return r.h(r.handlerCtx, d)
}

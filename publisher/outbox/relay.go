package outbox

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/keyorder/keyorder/publisher"
)

// settleDelay is how long a relay waits for more results before it
// deletes what the first one took.
const settleDelay = time.Millisecond

// soonFirst and soonMax are the first and the longest wait of the looks
// after a wake from Add: a writer's commit follows its Add within a
// moment, or after the rest of its transaction, however long.
const (
	soonFirst = 500 * time.Microsecond
	soonMax   = 4 * time.Millisecond
)

// A Relay publishes an [Outbox]'s events through a [publisher.Publisher],
// key by key in commit order, and deletes each event once the service has
// taken it. Any number of relays, in any number of processes, may run on
// one outbox: they split its shards through leases in the database (see
// the package documentation, Relays).
type Relay struct {
	o       *Outbox
	pub     *publisher.Publisher
	cfg     relayConfig
	id      string // this relay's owner name in the leases table
	rec     *recorder
	running atomic.Bool // set while Run runs
}

// NewRelay returns a relay of o that publishes through pub, which must be
// made [publisher.WithoutStamps]: the relay stamps each event itself,
// {[Outbox.Producer], [ordering.MakeSeq](0, n)}, so that every send of an
// event, by any relay, carries the same stamp and a re-send is a copy that
// subscribers ack unrun (S12). It returns [ErrStamped] for a stamping
// publisher, and an error matching [ErrInvalidConfig] for a nil argument
// or a bad option. The caller keeps ownership of pub, and closes it after
// Run has returned. The relay bounds what it has in flight itself (four
// batches): pub's flow control should not block (FlowControlBlock), which
// would hold the relay's loop, and with it the renewal of its leases.
func NewRelay(o *Outbox, pub *publisher.Publisher, opts ...RelayOption) (*Relay, error) {
	if o == nil || pub == nil {
		return nil, fmt.Errorf("%w: NewRelay needs an Outbox and a Publisher", ErrInvalidConfig)
	}
	if pub.Producer() != "" {
		return nil, ErrStamped
	}
	cfg := defaultRelayConfig()
	for i, opt := range opts {
		if opt == nil {
			return nil, fmt.Errorf("%w: option %d is nil", ErrInvalidConfig, i)
		}
		if err := opt(&cfg); err != nil {
			return nil, err
		}
	}
	return &Relay{o: o, pub: pub, cfg: cfg, id: "relay#" + newProducer()[len("outbox#"):], rec: newRecorder(&cfg, o.producer)}, nil
}

// ID returns the name the relay holds its leases under.
func (r *Relay) ID() string { return r.id }

// Stats returns what the relay did so far.
func (r *Relay) Stats() Stats { return r.rec.stats() }

// Run publishes the outbox's events of the shards the relay holds until
// ctx ends, and returns nil then, [ErrRunning] if another Run of r is
// under way, or [publisher.ErrClosed] once it finds its publisher closed.
//
// Run reads its shards' pending events in key and number order, a page of
// [WithBatchSize] at a time while it has room (the first page of a pass,
// up to its room), and publishes each key's
// events, in number order, with [publisher.WithOrderingKey]: each behind
// the one before, [publisher.WithAfter] it, the key's next events behind
// those in flight, and many keys at once. It reads when woken (by
// [Outbox.Add] in this process, by a [WithListener]) and every
// [WithPollInterval]; and at once when its listener listens again after
// failing, or it takes shards. A wake's read takes everything committed
// before it. When results are in, it deletes the events the
// service took (in a burst of a page or more, up to a poll interval
// later, so that the publishes go first), in one statement for all the
// keys: a prefix of each key's, since a failure fails the key's tail with
// it (P4). What failed stays and is sent again, after a backoff of the
// key's, from its first failed number: never a later number before an
// earlier one, and never a number skipped.
//
// An outbox belongs to one topic: the first Run of any relay records its
// publisher's ([publisher.Publisher.Topic]) in the outbox's meta table,
// and Run returns an error matching [ErrInvalidConfig], naming both
// topics, for a relay whose publisher publishes to another, before it
// publishes anything: a service's events never reach another service's
// topic, nor are deleted by its relay. Services that share a database
// each take an outbox of their own, [WithTable]. Run returns a [*DBError]
// if the database fails this check, and nil if ctx ends during it.
//
// A row it cannot publish (see [Stats].Invalid) sets its key aside, with a
// backoff; database errors are logged and tried again. Once ctx ends, Run
// publishes nothing new, waits up to [WithDrainTimeout] for the results
// in flight and deletes what they took, gives up its leases so that
// another relay takes its shards at once, and returns after every
// goroutine it started has exited.
func (r *Relay) Run(ctx context.Context) error {
	if !r.running.CompareAndSwap(false, true) {
		return ErrRunning
	}
	defer r.running.Store(false)
	if err := r.o.claimTopic(ctx, r.pub.Topic()); err != nil {
		if ctx.Err() != nil {
			return nil // ended before it began: nothing to drain
		}
		return err
	}
	defer r.rec.gauges()()
	ru := newRun(r)
	defer ru.conn.giveBack() // after every delete has returned
	defer ru.closePages()
	defer ru.wg.Wait()
	defer ru.stopWaiting()
	hint, unhint := r.o.wakers.add()
	defer unhint()
	lis := listening{l: r.cfg.listener, channel: r.o.t.channel, rec: r.rec}
	defer lis.stop()
	lis.start(ctx)
	ru.leaseRound(ctx)
	renewCtx, stopRenewing := context.WithCancel(ctx)
	renewing := make(chan struct{})
	go func() { defer close(renewing); ru.renewer(renewCtx) }()
	// The renewer stops before the drain, whose end gives the leases up.
	stopRenewer := func() { stopRenewing(); <-renewing }
	defer stopRenewer()
	leaseTick := time.NewTicker(r.cfg.lease / 3)
	defer leaseTick.Stop()
	defer ru.poll.Stop()
	// After a wake from Add, whose transaction commits later, the relay
	// looks 0.5, 1, 2, 4, then every 4 ms, until it finds something to
	// publish or a poll interval has passed since the last wake; soonStep
	// is 0 when no look is due. On PostgreSQL, while a listener listens,
	// the commit's notification wakes the relay instead.
	soon, soonStep, lastHint := time.NewTimer(time.Hour), time.Duration(0), time.Time{}
	soon.Stop()
	defer soon.Stop()
	// Results that come in together are settled together, in one
	// statement: a settle waits up to settleDelay for more.
	settleSoon := time.NewTimer(time.Hour)
	settleSoon.Stop()
	defer settleSoon.Stop()
	var ready []*batch
	for !ru.closed {
		select {
		case <-ctx.Done():
			stopRenewer()
			ru.settle(ctx, ready)
			ru.drain()
			return nil
		case b := <-ru.done:
			if len(ready) == 0 {
				settleSoon.Reset(settleDelay)
			}
			ready = ru.collect(ready, b)
			if len(ready) == ru.batches { // nothing more to wait for
				settleSoon.Stop()
				ready = ru.settleAndRead(ctx, ready)
			}
		case <-settleSoon.C:
			ready = ru.settleAndRead(ctx, ready)
		case err := <-ru.deleted:
			ru.deleteDone(ctx, err)
		case <-ru.poll.C:
			// Not a wake: a pass paused for room goes on, and the next
			// poll finds what it had read past. A new pass after each
			// poll read the rows in flight again, in a burst (SQLite,
			// 10,000 events over 50 keys: relay ÷ direct 0.67 → 0.42).
			ru.read(ctx, false)
		case <-hint:
			if lis.ch != nil && r.o.d == PostgreSQL {
				// The listener tells of the commit: looks meanwhile would
				// read every 4 ms for as long as the writer's transaction.
				continue
			}
			lastHint = time.Now()
			if soonStep == 0 { // else a look is due already
				soonStep = soonFirst
				soon.Reset(soonStep)
			}
		case <-soon.C:
			// Until the look finds the commit, or gives up to the poll.
			if ru.read(ctx, true) || time.Since(lastHint)+soonStep >= r.cfg.poll {
				soonStep = 0
			} else {
				soonStep = min(2*soonStep, soonMax)
				soon.Reset(soonStep)
			}
		case _, ok := <-lis.ch:
			if !ok {
				lis.ended()
				continue
			}
			ru.read(ctx, true)
		case <-leaseTick.C:
			takes := ru.takes
			ru.leaseRound(ctx)
			// Commits while the listener was down notified no one, and
			// shards just taken hold what their relay left: read them
			// now, rather than at the poll.
			if lis.restart(ctx) || ru.takes != takes {
				ru.read(ctx, true)
			}
		}
	}
	stopRenewer()
	ru.settle(ctx, ready)
	ru.drain()
	return publisher.ErrClosed
}

// settleAndRead settles ready, goes on with a pass that waited for room,
// and returns ready emptied.
func (ru *run) settleAndRead(ctx context.Context, ready []*batch) []*batch {
	ru.settle(ctx, ready)
	if ru.pass != nil {
		ru.read(ctx, false)
	}
	return ready[:0]
}

// listening runs a relay's [Listener], if it has one.
type listening struct {
	l       Listener
	channel string
	rec     *recorder
	ch      <-chan struct{} // nil while not listening
	cancel  context.CancelFunc
	down    bool // the listener failed or ended: start it again
}

func (li *listening) start(ctx context.Context) {
	if li.l == nil {
		return
	}
	lctx, cancel := context.WithCancel(ctx)
	ch, err := li.l(lctx, li.channel)
	if err != nil || ch == nil {
		cancel()
		if ctx.Err() == nil {
			li.rec.dbFailed("listen for commits", fmt.Errorf("listener: %v", err))
		}
		li.down = true
		return
	}
	li.ch, li.cancel, li.down = ch, cancel, false
}

// ended notes that the listener closed its channel.
func (li *listening) ended() {
	li.cancel()
	li.ch, li.down = nil, true
	li.rec.dbFailed("listen for commits", errors.New("the listener stopped"))
}

// restart starts the listener again if it is down, and reports whether
// it is listening again.
func (li *listening) restart(ctx context.Context) bool {
	if !li.down || ctx.Err() != nil {
		return false
	}
	li.start(ctx)
	return !li.down
}

// stop stops the listener and waits, a while, for its channel to close.
func (li *listening) stop() {
	if li.ch == nil {
		return
	}
	li.cancel()
	t := time.NewTimer(stmtTimeout)
	defer t.Stop()
	for {
		select {
		case _, ok := <-li.ch:
			if !ok {
				return
			}
		case <-t.C:
			return
		}
	}
}

// claimTopic records topic as the outbox's relays' topic, unless one is
// recorded, and refuses another one.
func (o *Outbox) claimTopic(ctx context.Context, topic string) error {
	tx, err := o.db.BeginTx(ctx, nil)
	if err != nil {
		return &DBError{Op: "begin", Err: err}
	}
	defer func() { _ = tx.Rollback() }()
	recorded, err := o.shared(ctx, tx, "topic", topic)
	if err != nil {
		return err
	}
	if err := tx.Commit(); err != nil {
		return &DBError{Op: "commit the topic", Err: err}
	}
	if recorded != topic {
		return fmt.Errorf("%w: the relay publishes to %s, but the outbox %s is %s's: give each topic's service an outbox of its own (WithTable)",
			ErrInvalidConfig, topic, o.t.events, recorded)
	}
	return nil
}

package outbox

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/keyorder/keyorder/publisher"
)

// settleDelay is how long a relay waits for more results before it
// deletes what the first one took.
const settleDelay = time.Millisecond

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
// ctx ends, and returns nil then, or [ErrRunning] if another Run of r is
// under way.
//
// Each round reads up to [WithBatchSize] pending events of its shards,
// the oldest numbers of each key first, and publishes each key's run of
// events, in number order, with [publisher.WithOrderingKey]; one run per
// key is in flight at a time, and many keys at once. When a run's results
// are in, it deletes the events the service took: a prefix of the run,
// since a failure fails the key's tail with it (P4). What failed stays
// and is sent again, after a backoff of the key's, from its first failed
// number: never a later number before an earlier one, and never a number
// skipped.
//
// Database errors are logged and tried again on the next round. Once ctx
// ends, Run publishes nothing new, waits up to [WithDrainTimeout] for the
// results in flight and deletes what they took, gives up its leases so
// that another relay takes its shards at once, and returns after every
// goroutine it started has exited.
func (r *Relay) Run(ctx context.Context) error {
	if !r.running.CompareAndSwap(false, true) {
		return ErrRunning
	}
	defer r.running.Store(false)
	defer r.rec.gauges()()
	ru := newRun(r)
	defer ru.wg.Wait()
	defer ru.stopWaiting()
	ru.leaseRound(ctx)
	leaseTick := time.NewTicker(r.cfg.lease / 3)
	defer leaseTick.Stop()
	poll := time.NewTimer(0)
	defer poll.Stop()
	// Results that come in together are settled together, in one
	// transaction: a settle waits up to settleDelay for more.
	settleSoon := time.NewTimer(time.Hour)
	settleSoon.Stop()
	defer settleSoon.Stop()
	var ready []*batch
	for {
		select {
		case <-ctx.Done():
			ru.settle(ctx, ready)
			ru.drain()
			return nil
		case b := <-ru.done:
			if len(ready) == 0 {
				settleSoon.Reset(settleDelay)
			}
			ready = ru.collect(ready, b)
			if len(ready) == len(ru.inflight) { // nothing more to wait for
				settleSoon.Stop()
				ready = ru.settleAndRead(ctx, ready)
			}
		case <-settleSoon.C:
			ready = ru.settleAndRead(ctx, ready)
		case <-poll.C:
			ru.read(ctx)
			poll.Reset(r.cfg.poll)
		case <-leaseTick.C:
			ru.leaseRound(ctx)
		}
	}
}

// settleAndRead settles ready, reads what there is room for, and returns
// ready emptied.
func (ru *run) settleAndRead(ctx context.Context, ready []*batch) []*batch {
	ru.settle(ctx, ready)
	ru.read(ctx)
	return ready[:0]
}

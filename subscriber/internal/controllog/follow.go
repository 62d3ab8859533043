package controllog

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"sync"
	"sync/atomic"
	"time"

	"cloud.google.com/go/pubsub/v2"
	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/keyorder/keyorder/internal/window"
	"github.com/keyorder/keyorder/subscriber/internal/ephemeral"
)

// A follower reads the control log through a subscription of
// its own on the control topic, which it creates, seeks back to replay the
// log, follows live, and deletes when done. The subscription's filter
// admits the log's state events and this follower's own markers only, so
// neither a replay nor the live stream carries other processes' markers,
// the bulk of the log.
//
// The official client calls deliver one message at a time, in the log's
// order, since every event has the same ordering key. deliver applies each
// event once, by message ID, whatever the service sends again.
type follower struct {
	client  *pubsub.Client
	topic   string        // the control topic
	subName string        // the subscription followed for, whose name theirs extend
	me      string        // the Log it follows for
	lease   time.Duration // Config.Lease, for its states

	mu sync.Mutex
	// rp is the replayed state; seen the message IDs applied. Both guarded
	// by mu.
	rp   *logReplay
	seen *window.Window[struct{}]
	// waiters are this Log's events waiting for their verdict, by Seq;
	// captures the snapshots it begun, waiting for the state at their
	// begin, by nonce. Guarded by mu; each channel has room for its value.
	waiters  map[uint64]chan Verdict
	captures map[string]chan []*snapshotPart
	// changed is closed, and replaced, after every event applied: a
	// writer waits on it for the log to move (Changes). Guarded by mu.
	changed chan struct{}
	// view is what Log.View returns, read without a lock; replaced under
	// mu when the parked keys or the released messages change. seenAt
	// holds, for each parked key, when this follower first applied its
	// park, by the local clock; guarded by mu.
	view   atomic.Pointer[View]
	seenAt map[string]time.Time

	// sub is the subscription made by follow, set as soon as it exists,
	// and deleted by halt; follows counts those made, to name them.
	// cancel stops the Receive on sub, which then sets err and closes
	// exited. sub and cancel are set by follow and cleared by halt,
	// exited replaced by the next follow, by the goroutine that starts
	// and stops the follower; others read exited through gone, and err
	// once it is closed.
	sub     string
	follows int
	cancel  context.CancelFunc
	exited  chan struct{}
	err     error
}

// appliedDedup is how many control messages a follower remembers as
// applied, to skip the ones the service sends again: those come back with
// a redelivered tail, soon after they were first sent.
const appliedDedup = 10_000

func newFollower(client *pubsub.Client, topic, subName, me string, lease time.Duration) *follower {
	f := &follower{client: client, topic: topic, subName: subName, me: me, lease: lease,
		waiters: map[uint64]chan Verdict{}, captures: map[string]chan []*snapshotPart{}, changed: make(chan struct{})}
	f.reset()
	return f
}

// reset forgets what was applied, for a replay from another point.
func (f *follower) reset() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.rp = newLogReplay(f.lease)
	f.seen = window.New[struct{}](appliedDedup)
	f.publishView()
}

// follow reads the control log from the time from on, live, until halt:
// it makes a subscription of its own on the control topic, ordered, with a
// filter that admits the log's state events and this follower's markers,
// seeks it to from and receives from it. Each follow has a new
// subscription: one sought back at once after another Receive on it
// stopped could have its messages sent to the stream still closing.
func (f *follower) follow(ctx context.Context, from time.Time) error {
	f.follows++
	sub := ephemeral.Name(f.subName, "subscriptions", fmt.Sprintf("-parking-%s-%d", f.me, f.follows))
	admin := f.client.SubscriptionAdminClient
	filter := `attributes.` + attrState + ` = "1" OR attributes.` + attrTo + ` = "` + f.me + `"`
	if _, err := admin.CreateSubscription(ctx, ephemeral.Subscription(sub, f.topic, filter)); err != nil {
		return err
	}
	f.mu.Lock()
	f.sub = sub // halt deletes it, even if it is never received from
	f.mu.Unlock()
	if _, err := admin.Seek(ctx, &pubsubpb.SeekRequest{
		Subscription: sub, Target: &pubsubpb.SeekRequest_Time{Time: timestamppb.New(from)},
	}); err != nil {
		return err
	}
	rctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	exited := make(chan struct{})
	f.mu.Lock()
	f.cancel, f.exited = cancel, exited
	f.mu.Unlock()
	s := f.client.Subscriber(sub)
	s.ReceiveSettings.NumGoroutines = 1
	go func() {
		defer close(exited)
		f.err = s.Receive(rctx, f.deliver) // read after exited is closed
	}()
	return nil
}

// gone returns a channel closed when the follower stops receiving, for
// whatever reason, halt included; nil before the first follow.
func (f *follower) gone() <-chan struct{} {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.exited
}

// halt stops receiving, deletes the subscription, and returns the
// official Receive's error, if it failed. It gives up waiting when ctx
// ends, and returns ctx.Err() then: the official Receive waits for its
// requests in flight, up to a minute on a server that hangs, and its
// goroutine ends on its own.
func (f *follower) halt(ctx context.Context) error {
	f.mu.Lock()
	sub, cancel, exited := f.sub, f.cancel, f.exited
	f.sub, f.cancel = "", nil // exited stays: closed, for gone
	f.mu.Unlock()
	if sub == "" {
		return nil
	}
	var err error
	if cancel != nil {
		cancel()
		select {
		case <-exited:
			err = f.err
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	ephemeral.Remove(ctx, f.client, sub)
	return err
}

// deliver applies one message of the control log.
func (f *follower) deliver(_ context.Context, m *pubsub.Message) {
	m.Ack() // the state is in memory; a follower that dies takes its subscription with it
	ev, err := decodeEvent(m.Data)
	if err != nil {
		slog.Error("keyorder/subscriber: skipping an unreadable parking control event", "topic", f.topic, "id", m.ID, "err", err)
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, dup := f.seen.Get(m.ID); dup {
		return
	}
	f.seen.Update(m.ID, func(struct{}) struct{} { return struct{}{} })
	v := f.rp.apply(ev, m.PublishTime)
	if ev.By == f.me {
		if ch := f.waiters[ev.Seq]; ch != nil {
			delete(f.waiters, ev.Seq)
			ch <- v
		}
		if ch := f.captures[ev.Nonce]; ch != nil && ev.Kind == evSnapshotBegin {
			delete(f.captures, ev.Nonce)
			ch <- snapshotOf(f.rp.state)
		}
	}
	if ev.Kind.changesView() {
		f.publishView()
	}
	close(f.changed)
	f.changed = make(chan struct{})
}

// publishView replaces the view. f.mu must be held.
func (f *follower) publishView() {
	st := f.rp.state
	now := time.Now()
	v := &View{parked: make(map[string]string, len(st.keys)), since: make(map[string]time.Time, len(st.keys))}
	seenAt := make(map[string]time.Time, len(st.keys))
	for k, rec := range st.keys {
		v.parked[k] = rec.ParkID
		at, ok := f.seenAt[k+"\x00"+rec.ParkID]
		if !ok {
			at = now
		}
		seenAt[k+"\x00"+rec.ParkID] = at
		v.since[k] = at
	}
	f.seenAt = seenAt
	if len(st.released) > 0 {
		v.released = maps.Clone(st.released)
	}
	f.view.Store(v)
}

// await registers for the verdict of this Log's event seq, before it
// is published.
func (f *follower) await(seq uint64) <-chan Verdict {
	ch := make(chan Verdict, 1)
	f.mu.Lock()
	f.waiters[seq] = ch
	f.mu.Unlock()
	return ch
}

// forget drops the waiter of event seq, whose verdict is no longer wanted.
func (f *follower) forget(seq uint64) {
	f.mu.Lock()
	delete(f.waiters, seq)
	f.mu.Unlock()
}

// capture registers for the state as of this Log's snapshot begin
// nonce, before it is published.
func (f *follower) capture(nonce string) <-chan []*snapshotPart {
	ch := make(chan []*snapshotPart, 1)
	f.mu.Lock()
	f.captures[nonce] = ch
	f.mu.Unlock()
	return ch
}

func (f *follower) dropCapture(nonce string) {
	f.mu.Lock()
	delete(f.captures, nonce)
	f.mu.Unlock()
}

// changes returns a channel closed when the next event is applied.
func (f *follower) changes() <-chan struct{} {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.changed
}

// record returns a copy of key's park, nil if it is not parked.
func (f *follower) record(key string) *ParkRecord {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.rp.state.record(key)
}

// list returns the parked keys.
func (f *follower) list() []Summary {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.rp.state.list()
}

// replayed reports whether the state is whole, and when the newest whole
// snapshot was published.
func (f *follower) replayed() (whole bool, lastSnapshot time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.rp.whole, f.rp.lastSnapshot
}

// settle declares the state whole, for a replay that read all the control
// topic retains and found no snapshot: the log is younger than its
// retention, or nothing older can be had.
func (f *follower) settle() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.rp.whole, f.rp.pending = true, nil
}

package subscriber

import (
	"context"
	"crypto/rand"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"cloud.google.com/go/pubsub/v2"
	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/keyorder/keyorder/publisher"
	"github.com/keyorder/keyorder/subscriber/internal/ephemeral"
)

// Parking (WithParking) is a failure policy for poison messages: a message
// that fails for good parks its key. The message and every later message
// of the key are copied, in order, to the parking topic and acked on the
// subscription, and the key's new messages follow them there until
// Subscription.Release runs them through the handler. Other keys go on.
//
// The state, which keys are parked and which of their messages, is kept in
// Pub/Sub: the control log (park_log.go) on a control topic, replayed and
// followed by every Receive (park_follow.go). This file holds the
// Receive's part, the parking component, and the topics it needs;
// park_lane.go the hooks the lanes call and the flights that move a key's
// deliveries to the parking topic; park_barrier.go the barrier; and
// park_release.go Parked and Release.
//
// A lane's deliveries go through the parking component in three places:
//   - accept: a delivery of a key the lane was not holding anything of
//     waits for the barrier (park_barrier.go), so that it cannot run
//     before the Receive has seen a park of its key by another process;
//     one of a message released from parking lately is acked unrun.
//   - next: a lane whose key is parked, or that has just failed for good,
//     sends its queued deliveries on a flight instead of running them.
//   - failed: a message that fails for good parks its key, instead of
//     being nacked with its tail (S5).

// Attributes of a parked message, besides its own. A parked message keeps
// its original's stamp ([ordering.ProducerAttribute],
// [ordering.SeqAttribute]), which the parking publisher does not replace,
// so that the released Delivery has the original's Producer and Seq.
const (
	// AttrParkID names the park the message belongs to: its key's park
	// from the failure to the release. Releases read the parking topic
	// through a subscription filtered on it.
	AttrParkID = "keyorder-park-id"
	// AttrMessageID is the message's ID on the subscription's topic.
	AttrMessageID = "keyorder-message-id"
	// AttrSubscription is the full name of the subscription it was parked
	// from.
	AttrSubscription = "keyorder-subscription"
	// AttrPublishTime is when it was first published, in RFC 3339 with
	// nanoseconds.
	AttrPublishTime = "keyorder-publish-time"
	// AttrAttempts counts the handler calls the message had before it was
	// parked: 0 for a message parked behind the one that failed.
	AttrAttempts = "keyorder-attempts"
	// AttrError is the error of the message's last call, cut to the
	// service's 1024 bytes; absent for a message that never ran.
	AttrError = "keyorder-error"
)

// Attributes of the control log's messages, for the followers' filter.
const (
	attrState = "keyorder-state" // "1" on every event that makes the state
	attrTo    = "keyorder-to"    // on a marker: the Receive that wants it back
)

// controlKey is the ordering key every control event shares.
const controlKey = "keyorder-control"

// controlRetention is the message retention keyorder gives the parking
// and control topics it creates: the service's maximum, 31 days.
const controlRetention = 31 * 24 * time.Hour

// snapshotEvery is how often the running Receives republish the control
// state as a snapshot; tests shorten it.
var snapshotEvery = time.Hour

// seekMargin is how far before a park began its release seeks the parking
// topic, for clocks that differ between the service's machines.
const seekMargin = time.Minute

// parkingTopics are the topics of a subscription's parking, set up when
// the Subscription is made.
type parkingTopics struct {
	park      string        // where parked messages go
	control   string        // the control log
	retention time.Duration // the control topic's message retention
}

// setupParking creates the parking and control topics of sub when they are
// missing, and checks that they retain messages: releases and replays seek
// back over them.
func setupParking(ctx context.Context, client *pubsub.Client, sub *pubsubpb.Subscription, topicID string) (*parkingTopics, error) {
	if !sub.GetEnableMessageOrdering() {
		return nil, invalid("WithParking: subscription %s has no message ordering", sub.GetName())
	}
	t := &parkingTopics{
		park:    fullName(client, "topics", topicID),
		control: ephemeral.Name(sub.GetName(), "topics", "-parking-control"),
	}
	if _, err := retainedTopic(ctx, client, t.park); err != nil {
		return nil, err
	}
	ret, err := retainedTopic(ctx, client, t.control)
	if err != nil {
		return nil, err
	}
	t.retention = ret
	return t, nil
}

// retainedTopic creates topic with controlRetention unless it exists, and
// returns its message retention, which must not be 0.
func retainedTopic(ctx context.Context, client *pubsub.Client, topic string) (time.Duration, error) {
	got, err := client.TopicAdminClient.GetTopic(ctx, &pubsubpb.GetTopicRequest{Topic: topic})
	if status.Code(err) == codes.NotFound {
		got, err = client.TopicAdminClient.CreateTopic(ctx, &pubsubpb.Topic{Name: topic, MessageRetentionDuration: durationpb.New(controlRetention)})
		if status.Code(err) == codes.AlreadyExists {
			got, err = client.TopicAdminClient.GetTopic(ctx, &pubsubpb.GetTopicRequest{Topic: topic})
		}
	}
	if err != nil {
		return 0, fmt.Errorf("keyorder/subscriber: parking topic %s: %w", topic, err)
	}
	ret := got.GetMessageRetentionDuration().AsDuration()
	if ret <= 0 {
		return 0, invalid("WithParking: topic %s has no message retention, which parking needs to read it back", topic)
	}
	return ret, nil
}

// parking is a Receive's part in parking. It starts before the official
// Receive and stops after it.
//
// Goroutines: run, the barrier's and snapshots' loop, started by
// startParking and waited for by stop; the follower's Receive, stopped by
// stop; one per flight, counted in flights and waited for by shutdown and
// stop; and the callers of Release, counted in rel.
type parking struct {
	r      *receiver
	topics *parkingTopics
	me     string
	f      *follower
	ctl    *publisher.Publisher // control events, all with controlKey
	out    *publisher.Publisher // copies to the parking topic
	b      barrier
	seq    atomic.Uint64 // this Receive's events

	// ops bounds publishes and waits; cancelled when a shutdown has
	// waited the drain timeout for flights, and at stop.
	ops       context.Context
	cancelOps context.CancelFunc
	flights   sync.WaitGroup
	rel       releases
	// fail cancels the Receive with the cause when the control log can
	// no longer be followed.
	fail     context.CancelCauseFunc
	stopLoop chan struct{} // closed by stop
	loopDone chan struct{} // closed when run returns
}

// fastPublish sends control events and copies with little batching delay:
// a barrier waits for its marker's round trip.
var fastPublish = func() pubsub.PublishSettings {
	s := pubsub.DefaultPublishSettings
	s.DelayThreshold = time.Millisecond
	return s
}()

// newParking makes the parking component of s, for r, or for a replay of
// the log outside a Receive when r is nil.
func newParking(s *Subscription, r *receiver) (*parking, error) {
	p := &parking{r: r, topics: s.parking, me: ephemeral.NewID(), stopLoop: make(chan struct{}), loopDone: make(chan struct{})}
	p.b.kick = make(chan struct{}, 1)
	p.ops, p.cancelOps = context.WithCancel(context.Background())
	var err error
	// Neither publisher stamps (S12): the control log orders itself, and a
	// parked copy keeps its original's stamp (flight.copyOf).
	if p.ctl, err = publisher.New(s.client, p.topics.control,
		publisher.WithDefaultOrderingKey(controlKey), publisher.WithPublishSettings(fastPublish), publisher.WithoutStamps()); err != nil {
		return nil, err
	}
	if r != nil {
		if p.out, err = publisher.New(s.client, p.topics.park, publisher.WithPublishSettings(fastPublish), publisher.WithoutStamps()); err != nil {
			_ = p.ctl.Close(context.Background())
			return nil, err
		}
	}
	p.f = newFollower(s.client, p.topics.control, s.name, p.me)
	return p, nil
}

// startParking starts r's parking, r.park: it replays the control log
// until it is caught up, then follows it. It returns the context Receive
// must use, cancelled if the log can no longer be followed. If parking
// cannot start, it returns a nil context, with the error, or with nil if
// ctx ended meanwhile: Receive then returns at once, as it would have.
func startParking(ctx context.Context, r *receiver) (context.Context, error) {
	p, err := newParking(r.s, r)
	if err != nil {
		return nil, err
	}
	if err := p.catchUp(ctx); err != nil {
		p.closePublishers(r.cfg.drainTimeout)
		if ctx.Err() != nil {
			return nil, nil
		}
		return nil, fmt.Errorf("keyorder/subscriber: replaying the parking control log: %w", err)
	}
	rctx, cancel := context.WithCancelCause(ctx)
	p.fail = cancel
	r.park = p
	go p.run()
	return rctx, nil
}

// catchUp creates the follower's subscription and replays the control log
// into it: first the last few snapshot periods, which hold a whole
// snapshot if any process ran lately, then, if they do not, all the topic
// retains.
func (p *parking) catchUp(ctx context.Context) error {
	windows := []time.Duration{3 * snapshotEvery, p.topics.retention}
	if windows[0] >= windows[1] {
		windows = windows[1:]
	}
	for i, w := range windows {
		if i > 0 {
			_ = p.f.halt()
			p.f.reset()
		}
		if err := p.f.follow(ctx, time.Now().Add(-w)); err != nil {
			return err
		}
		if _, err := p.record(ctx, &event{Kind: evMarker}); err != nil {
			_ = p.f.halt()
			return err
		}
		if whole, _ := p.f.replayed(); whole {
			return nil
		}
	}
	p.f.settle()
	return nil
}

// closePublishers sends what the publishers hold, within timeout, and
// stops them.
func (p *parking) closePublishers(timeout time.Duration) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout+time.Second)
	defer cancel()
	_ = p.ctl.Close(ctx)
	if p.out != nil {
		_ = p.out.Close(ctx)
	}
	p.cancelOps()
}

// run is the parking component's loop: it sends the barrier's markers
// when lanes wait for one, publishes a snapshot when one is due, and
// fails the Receive if the follower stops.
func (p *parking) run() {
	defer close(p.loopDone)
	// The first check comes soon: a Receive that had to read the whole
	// log, for want of a snapshot, spares the next one that.
	check := time.NewTimer(snapshotCheck() / 64)
	defer check.Stop()
	gone := p.f.gone()
	for {
		select {
		case <-p.stopLoop:
			return
		case <-gone:
			err := p.f.err
			if err == nil {
				err = errFollowerStopped
			}
			p.fail(fmt.Errorf("keyorder/subscriber: following the parking control log: %w", err))
			<-p.stopLoop
			return
		case <-p.b.kick:
			p.barrierRound()
		case <-check.C:
			if _, last := p.f.replayed(); time.Since(last) > snapshotEvery {
				if err := p.snapshot(p.ops); err != nil && p.ops.Err() == nil {
					slog.Warn("keyorder/subscriber: could not publish a parking snapshot; will try again", "topic", p.topics.control, "err", err)
				}
			}
			check.Reset(snapshotCheck())
		}
	}
}

// snapshotCheck is how long run waits before it checks whether a snapshot
// is due: a quarter of the period, with jitter, so that processes started
// together do not all publish one.
func snapshotCheck() time.Duration {
	var b [1]byte
	_, _ = rand.Read(b[:])
	q := snapshotEvery / 4
	return q + q*time.Duration(b[0])/256
}

// snapshot publishes the state as a snapshot: a begin, then the state as
// of the begin's place in the log, in parts.
func (p *parking) snapshot(ctx context.Context) error {
	nonce := ephemeral.NewID()
	captured := p.f.capture(nonce)
	defer p.f.dropCapture(nonce)
	if _, err := p.record(ctx, &event{Kind: evSnapshotBegin, Nonce: nonce}); err != nil {
		return err
	}
	parts := <-captured // sent before the verdict
	results := make([]*publisher.Result, len(parts))
	for i, part := range parts {
		results[i] = p.publish(ctx, &event{Kind: evSnapshot, Nonce: nonce, Part: part, Last: i == len(parts)-1})
	}
	for _, res := range results {
		if _, err := res.Get(ctx); err != nil {
			return err
		}
	}
	return nil
}

// publish sends ev to the control log as this Receive's.
func (p *parking) publish(ctx context.Context, ev *event) *publisher.Result {
	ev.By = p.me
	data, err := encodeEvent(ev)
	if err != nil {
		panic(err) // events hold strings, times and numbers only
	}
	headers := map[string]string{attrState: "1"}
	if ev.Kind == evMarker {
		headers = map[string]string{attrTo: p.me}
	}
	return p.ctl.Publish(ctx, &publisher.Message{Data: data, Headers: headers})
}

// record publishes ev and waits until the follower has applied it, and
// returns its verdict.
func (p *parking) record(ctx context.Context, ev *event) (verdict, error) {
	ev.Seq = p.seq.Add(1)
	ch := p.f.await(ev.Seq)
	defer p.f.forget(ev.Seq)
	if _, err := p.publish(ctx, ev).Get(ctx); err != nil {
		return verdict{}, err
	}
	select {
	case v := <-ch:
		return v, nil
	case <-ctx.Done():
		return verdict{}, ctx.Err()
	case <-p.f.gone():
		return verdict{}, errFollowerStopped
	}
}

// shutdown ends what parking does for a stopping Receive: releases stop
// before their next message, and flights land. Both get the drain
// timeout; then handlers are cancelled and the flights' waits given up,
// their deliveries nacked.
func (p *parking) shutdown() {
	drained, timedOut := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(timedOut)
		t := time.NewTimer(p.r.cfg.drainTimeout)
		defer t.Stop()
		select {
		case <-t.C:
			p.r.cancelHandlers()
			p.cancelOps()
		case <-drained:
		}
	}()
	p.rel.close()
	p.flights.Wait()
	close(drained)
	<-timedOut
}

// stop stops the parking component once the official Receive has
// returned, and returns err, or why the control log could no longer be
// followed.
func (p *parking) stop(err error) error {
	close(p.stopLoop)
	p.cancelOps() // a marker or a snapshot on its way is not waited for
	<-p.loopDone
	if ferr := p.f.halt(); ferr != nil && err == nil {
		err = fmt.Errorf("keyorder/subscriber: following the parking control log: %w", ferr)
	}
	p.closePublishers(p.r.cfg.drainTimeout)
	return err
}

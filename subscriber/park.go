package subscriber

import (
	"context"
	"fmt"
	"sync"
	"time"

	"cloud.google.com/go/pubsub/v2"
	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/keyorder/keyorder/publisher"
	"github.com/keyorder/keyorder/subscriber/internal/barrier"
	"github.com/keyorder/keyorder/subscriber/internal/controllog"
)

// Parking (WithParking) is a failure policy for poison messages: a message
// that fails for good parks its key. The message and every later message
// of the key are copied, in order, to the parking topic and acked on the
// subscription, and the key's new messages follow them there until
// Subscription.Release runs them through the handler. Other keys go on.
//
// The state, which keys are parked and which of their messages, is kept in
// Pub/Sub: the control log on a control topic, replayed and followed by
// every Receive. The log is a package of its own, internal/controllog,
// which knows nothing of lanes: parking records events in it (a park, a
// forward, a release's claim, progress, stop and unpark) and reads their
// verdicts, its view of the parked keys, and its markers' round trips.
// This file holds the Receive's part, the parking component, and the
// topics it needs; lane_park.go the hooks the lanes call and the flights
// that move a key's deliveries to the parking topic; park_barrier.go the
// barrier's markers, which go through the log (internal/barrier is the
// barrier itself); and park_release.go Parked
// and Release, and park_request.go the release requests Receives carry out.
//
// A lane's deliveries go through the parking component in three places:
//   - accept: a delivery of a key the lane was not holding anything of
//     waits for the barrier (internal/barrier), so that it cannot run
//     before the Receive has seen a park of its key by another process;
//     one of a message released from parking lately is acked unrun.
//   - next: a lane whose key is parked, or that has just failed for good,
//     sends its queued deliveries on a flight instead of running them.
//   - failed: a message that fails for good parks its key, instead of
//     being nacked with its tail (S5).

// Attributes of a parked message, besides its own. A parked message keeps
// its original's stamp ([ordering.StampAttribute]), which the parking
// publisher does not replace, so that the released Delivery has the
// original's Producer and Seq.
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

// controlRetention is the message retention keyorder gives the parking
// and control topics it creates: the service's maximum, 31 days.
const controlRetention = 31 * 24 * time.Hour

// seekMargin is how far before a park began its release seeks the parking
// topic, for clocks that differ between the service's machines.
const seekMargin = time.Minute

// parkingTopics are the topics of a subscription's parking, set up when
// the Subscription is made.
type parkingTopics struct {
	park      string        // where parked messages go
	retention time.Duration // the control topic's message retention
}

// setupParking creates the parking and control topics of sub when they are
// missing, and checks that they retain messages: releases and replays seek
// back over them.
func setupParking(ctx context.Context, client *pubsub.Client, sub *pubsubpb.Subscription, topicID string) (*parkingTopics, error) {
	if !sub.GetEnableMessageOrdering() {
		return nil, invalid("WithParking: subscription %s has no message ordering", sub.GetName())
	}
	t := &parkingTopics{park: fullName(client, "topics", topicID)}
	if _, err := retainedTopic(ctx, client, t.park); err != nil {
		return nil, err
	}
	ret, err := retainedTopic(ctx, client, controllog.Topic(sub.GetName()))
	if err != nil {
		return nil, err
	}
	t.retention = ret
	if err := probeParking(ctx, client, sub.GetName()); err != nil {
		return nil, err
	}
	return t, nil
}

// logConfig is the configuration of the control log of sub, whose Close,
// or failed Open, waits drain for its events; only Receives publish
// snapshots.
func (t *parkingTopics) logConfig(sub string, drain time.Duration, snapshots bool) controllog.Config {
	return controllog.Config{Subscription: sub, Retention: t.retention, Lease: releaseLease, Snapshots: snapshots, Drain: drain}
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
// Goroutines: run, the barrier's loop, started by startParking and waited
// for by stop; the control log's, stopped by stop; one per flight, counted
// in flights and waited for by shutdown and stop; and the callers of
// Release, the watch of release requests and its runs, counted in rel.
type parking struct {
	r      *receiver
	topics *parkingTopics
	log    *controllog.Log
	out    *publisher.Publisher // copies to the parking topic
	b      *barrier.Barrier

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

// fastPublish sends copies with little batching delay: a flight waits for
// its copies before the key's deliveries are acked.
var fastPublish = func() pubsub.PublishSettings {
	s := pubsub.DefaultPublishSettings
	s.DelayThreshold = time.Millisecond
	s.Timeout = controllog.PublishTimeout // as the control log's: a flight waits for them
	return s
}()

// startParking starts r's parking, r.park: it opens the control log,
// which replays it until it is caught up, then follows it. It returns the
// context Receive must use, cancelled if the log can no longer be
// followed. If parking cannot start, it returns a nil context, with the
// error, or with nil if ctx ended meanwhile: Receive then returns at once,
// as it would have.
func startParking(ctx context.Context, r *receiver) (context.Context, error) {
	// A failed Open gives up on the server within the drain timeout and
	// a second, so that a Receive catching up returns within
	// ShutdownBound of its ctx's end (S7).
	lg, err := controllog.Open(ctx, r.s.client, r.s.parking.logConfig(r.s.name, r.cfg.drainTimeout, true))
	if err != nil {
		if ctx.Err() != nil {
			return nil, nil
		}
		return nil, fmt.Errorf("keyorder/subscriber: replaying the parking control log: %w", err)
	}
	// A parked copy keeps its original's stamp (flight.copyOf): the
	// publisher does not stamp (S12).
	out, err := publisher.New(r.s.client, r.s.parking.park, publisher.WithPublishSettings(fastPublish), publisher.WithoutStamps())
	if err != nil {
		_ = lg.Close()
		return nil, err
	}
	p := &parking{r: r, topics: r.s.parking, log: lg, out: out, stopLoop: make(chan struct{}), loopDone: make(chan struct{})}
	p.b = barrier.New(r.cfg.parkingWait)
	p.ops, p.cancelOps = context.WithCancel(context.Background())
	rctx, cancel := context.WithCancelCause(ctx)
	p.fail = cancel
	r.park = p
	go p.run()
	p.startRequests() // park_request.go
	return rctx, nil
}

// run is the parking component's loop: it sends the barrier's markers
// when lanes wait for one, and fails the Receive if the control log stops
// being followed.
func (p *parking) run() {
	defer close(p.loopDone)
	gone := p.log.Gone()
	refresh := time.NewTimer(time.Hour)
	refresh.Stop()
	defer refresh.Stop()
	for {
		select {
		case <-p.stopLoop:
			return
		case <-gone:
			p.fail(fmt.Errorf("keyorder/subscriber: following the parking control log: %w", p.log.Err()))
			<-p.stopLoop
			return
		case <-p.b.Kick():
		case <-refresh.C:
		}
		p.barrierRound()
		if d, ok := p.b.NextRefresh(time.Now()); ok {
			refresh.Reset(d)
		}
	}
}

// shutdown ends what parking does for a stopping Receive: releases stop
// before their next message, and flights land. Both get what is left of
// the drain timeout, which the handlers had too; then handlers are
// cancelled and the flights' waits given up, their deliveries nacked.
func (p *parking) shutdown() {
	drained, timedOut := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(timedOut)
		t := time.NewTimer(time.Until(p.r.ending.drainEnd(p.r.cfg.drainTimeout)))
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
// followed. It waits for the server until the shutdown's time is up
// (ShutdownBound).
func (p *parking) stop(err error) error {
	close(p.stopLoop)
	p.cancelOps() // a marker on its way is not waited for
	<-p.loopDone
	late := p.r.ending.deadline()
	if ferr := p.log.Shutdown(late); ferr != nil && err == nil && late.Err() == nil {
		err = fmt.Errorf("keyorder/subscriber: following the parking control log: %w", ferr)
	}
	_ = p.out.Close(late)
	return err
}

package subscriber

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"cloud.google.com/go/pubsub/v2"
	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/keyorder/keyorder/internal/resource"

	"github.com/keyorder/keyorder/subscriber/internal/engine"
)

// Replay hands h every message published to topicID from from up to the
// moment Replay was called, once each, in order per key, then returns nil.
// It needs no subscription of the caller's: it makes its own and deletes
// it.
//
//   - Setup. The topic must retain messages (its message retention
//     duration, which [SetTopicRetention] sets); otherwise Replay returns
//     an error matching [ErrNoRetention], and one matching
//     [ErrBeforeRetention] when from is older than the retention reaches;
//     [ErrNotFound] when the topic does not exist. A zero from means the oldest
//     message retained. Replay creates an ordered subscription on the topic
//     and seeks it to from. The subscription expires after a day unused,
//     the service's minimum, in case the process dies before deleting it.
//   - Delivery. The messages published at or after from and before Replay
//     was called (by their PublishTime against Replay's clock) go to h;
//     later ones are acked without calling h. A key's messages run one at a
//     time, in publish order, on the key's partition, and keys run in
//     parallel on [WithWorkers] workers, as in [Subscription.Receive]; acks
//     are Replay's business. Redelivered tails, duplicate deliveries and
//     broken streams change nothing in what h sees: a message that comes
//     back after it was processed is acked without calling h again (S6,
//     within [WithDedupWindow]), and so is a stamped copy under a new
//     message ID (within [WithSequenceWindow]). Gaps in producers'
//     sequences go to [WithGapHandler].
//   - The end. Replay has caught up, and returns nil, once every message
//     in range it has received has been processed, and for
//     [WithQuietPeriod] no message in range has arrived or finished
//     processing. The service reports no backlog, and orders nothing
//     across keys, so this is the only signal there is: a message the
//     service holds back for longer than the quiet period is missed. When h
//     returns an error or panics, Replay stops and returns a *[ReplayError]
//     that names the message; h is not called again, and the failed
//     message is not retried. When ctx ends, Replay stops and returns
//     ctx.Err().
//   - Cleanup. Replay deletes its subscription before it returns, and
//     returns only after every goroutine it started has exited.
//
// opts are Receive's options, so that a service can pass Replay the ones
// it receives with. Replay's failure policy is its own: the first failure
// stops it, so [WithMaxAttempts], [WithBackoff] and [WithParking] do not
// apply (Replay parks nothing and makes no control topic), and neither do
// [WithDeadLetterPolicy] and [WithRetryPolicy], which shape a subscription
// [CreateWithTopic] makes. [WithQuietPeriod] applies only here.
func Replay(ctx context.Context, client *pubsub.Client, topicID string, from time.Time, h Handler, opts ...Option) (err error) {
	defer func() { err = ended(ctx, "replaying", err) }()
	start := time.Now()
	cfg, err := newConfig(opts)
	if err != nil {
		return err
	}
	cfg.parking = "" // the first failure stops Replay: nothing parks
	cfg.push = pushOptions{}
	switch {
	case client == nil:
		return invalid("Replay with nil client")
	case h == nil:
		return invalid("Replay with nil handler")
	case from.After(start):
		return invalid("Replay from %v: after Replay started, at %v", from, start)
	}
	if err := resource.Topic(topicID); err != nil {
		return invalid("Replay: %v", err)
	}
	topic := fullName(client, "topics", topicID)
	seekTo, err := replayStart(ctx, client, topic, from, start)
	if err != nil {
		return err
	}
	sub, err := createReplaySubscription(ctx, client, topic)
	if err != nil {
		return err
	}
	var s *Subscription
	if s, err = newSubscription(ctx, client, sub, cfg); err == nil {
		err = seekAndRun(ctx, s, seekTo, from, start, h)
	}
	// The subscription goes whatever happened, even if ctx has ended.
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), deleteTimeout)
	defer cancel()
	if derr := client.SubscriptionAdminClient.DeleteSubscription(dctx, &pubsubpb.DeleteSubscriptionRequest{Subscription: sub.Name}); derr != nil && status.Code(derr) != codes.NotFound {
		err = errors.Join(err, fmt.Errorf("keyorder/subscriber: delete replay subscription %s (it expires after %v unused): %w", sub.Name, replayExpiry, derr))
	}
	return err
}

// Bounds of Replay's subscription and cleanup.
const (
	// replayExpiry is the shortest expiration policy the service accepts.
	// The subscription's own message retention may not exceed it; the
	// topic's retention is what keeps the messages Replay reads.
	replayExpiry = 24 * time.Hour
	// deleteTimeout bounds the deletion of the subscription.
	deleteTimeout = 30 * time.Second
)

// replayStart checks that topic retains messages from from on, and returns
// where to seek: from, or for a zero from the oldest retained message.
func replayStart(ctx context.Context, client *pubsub.Client, topic string, from, start time.Time) (time.Time, error) {
	t, err := client.TopicAdminClient.GetTopic(ctx, &pubsubpb.GetTopicRequest{Topic: topic})
	if status.Code(err) == codes.NotFound {
		return time.Time{}, fmt.Errorf("%w: topic %s", ErrNotFound, topic)
	}
	if err != nil {
		return time.Time{}, fmt.Errorf("keyorder/subscriber: topic %s: %w", topic, err)
	}
	// On a topic without retention a Seek succeeds and brings back
	// nothing older than the subscription: it must not pass for an empty
	// replay.
	retention := t.GetMessageRetentionDuration().AsDuration()
	if retention <= 0 {
		return time.Time{}, fmt.Errorf("%w: %s", ErrNoRetention, topic)
	}
	oldest := start.Add(-retention)
	switch {
	case from.IsZero():
		return oldest, nil
	case from.Before(oldest):
		return time.Time{}, fmt.Errorf("%w: %s retains %v, from %v to now, not from %v",
			ErrBeforeRetention, topic, retention, oldest.Format(time.RFC3339), from.Format(time.RFC3339))
	}
	return from, nil
}

// createReplaySubscription creates Replay's ordered subscription on topic,
// named keyorder-replay-<random> and labelled keyorder=replay, so that one
// left behind by a process that died is easy to find.
func createReplaySubscription(ctx context.Context, client *pubsub.Client, topic string) (*pubsubpb.Subscription, error) {
	name := fullName(client, "subscriptions", "keyorder-replay-"+rand.Text())
	sub, err := client.SubscriptionAdminClient.CreateSubscription(ctx, &pubsubpb.Subscription{
		Name:                     name,
		Topic:                    topic,
		EnableMessageOrdering:    true,
		MessageRetentionDuration: durationpb.New(replayExpiry),
		ExpirationPolicy:         &pubsubpb.ExpirationPolicy{Ttl: durationpb.New(replayExpiry)},
		Labels:                   map[string]string{"keyorder": "replay"},
	})
	if err != nil {
		return nil, fmt.Errorf("keyorder/subscriber: create replay subscription on %s: %w", topic, err)
	}
	return sub, nil
}

// seekAndRun seeks s to seekTo and receives on it until Replay has caught
// up, h has failed, receiving has failed or ctx has ended.
func seekAndRun(ctx context.Context, s *Subscription, seekTo, from, start time.Time, h Handler) error {
	_, err := s.client.SubscriptionAdminClient.Seek(ctx, &pubsubpb.SeekRequest{
		Subscription: s.name,
		Target:       &pubsubpb.SeekRequest_Time{Time: timestamppb.New(seekTo)},
	})
	if status.Code(err) == codes.Unimplemented {
		return unsupported("Replay", "Seek to a time on an ordered subscription", err)
	}
	if err != nil {
		return fmt.Errorf("keyorder/subscriber: seek replay subscription %s to %v: %w", s.name, seekTo, err)
	}
	rp := &replay{h: h, span: engine.NewRange(from, start, s.cfg.quiet), failed: make(chan struct{})}
	s.span = rp.span
	return rp.run(ctx, s)
}

// replay is the state of one Replay, shared by the receiver's callback
// and turns and by Replay's own goroutine, which watches for the end.
type replay struct {
	h    Handler
	span *engine.Range // set once: the range of publish times handed to h, and the rule for the end

	// failed is closed by the first failure of h, whose error err then
	// holds; stopped is set at the same time, so that h is not called
	// again.
	once    sync.Once
	stopped atomic.Bool
	err     *ReplayError
	failed  chan struct{}
}

// run receives on s until the end, as Replay says, and returns why it
// ended: nil once caught up.
func (rp *replay) run(ctx context.Context, s *Subscription) error {
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	rp.span.Active(time.Now())
	received := make(chan error, 1)
	go func() { received <- s.Receive(rctx, rp.handle) }()

	tick := time.NewTicker(min(max(s.cfg.quiet/10, 10*time.Millisecond), 250*time.Millisecond))
	defer tick.Stop()
	for {
		select {
		case err := <-received:
			// Receiving failed for good before the end.
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return err
		case <-rp.failed:
			cancel()
			<-received
			return rp.err
		case <-ctx.Done():
			<-received
			return ctx.Err()
		case now := <-tick.C:
			r := s.current.Load()
			if r == nil || !rp.span.Done(now, r.Idle) {
				continue
			}
			cancel()
			err := <-received
			if rp.stopped.Load() {
				return rp.err // h failed while Receive shut down
			}
			return err
		}
	}
}

// handle is the Handler Replay's Receive runs: h, until h fails once.
//
// It calls h as the call path does (invokeHandler), so that a panic is
// converted once, into the *PanicError the path would make; an exit of
// the goroutine is recorded as ErrHandlerExited on the way out.
func (rp *replay) handle(ctx context.Context, d *Delivery) (err error) {
	if rp.stopped.Load() {
		return errReplayStopped
	}
	err = ErrHandlerExited
	defer func() {
		if err != nil {
			rp.fail(d, err)
		}
		rp.span.Active(time.Now()) // the ack may let the service send more of the key
	}()
	err = engine.InvokeHandler(rp.h, ctx, d)
	return err
}

// fail records the first failure of h, which stops Replay.
func (rp *replay) fail(d *Delivery, err error) {
	rp.once.Do(func() {
		rp.err = &ReplayError{
			MessageID: d.ID, Key: d.Key, PublishTime: d.PublishTime,
			Producer: d.Producer, Seq: d.Seq, Err: err,
		}
		rp.stopped.Store(true)
		close(rp.failed)
	})
}

// errReplayStopped fails the calls that come after h has failed, so that
// their messages are not acked.
var errReplayStopped = errors.New("keyorder/subscriber: replay stopped")

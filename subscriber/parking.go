package subscriber

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"cloud.google.com/go/pubsub/v2"
	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/keyorder/keyorder/subscriber/internal/controllog"
	"github.com/keyorder/keyorder/subscriber/internal/parking"
)

// Parking's public face (WithParking): the parked message's attributes,
// ParkedKey, the setup of the parking and control topics when the
// Subscription is made, and Parked, Release, RequestRelease and
// WithdrawRelease, thin calls into internal/parking, which runs it.

// Attributes of a parked message, besides its own. A parked message keeps
// its original's stamp ([ordering.StampAttribute]), which the parking
// publisher does not replace, so that the released Delivery has the
// original's Producer and Seq.
const (
	// AttrParkID names the park the message belongs to: its key's park
	// from the failure to the release. Releases read the parking topic
	// through a subscription filtered on it.
	AttrParkID = parking.AttrParkID
	// AttrMessageID is the message's ID on the subscription's topic.
	AttrMessageID = parking.AttrMessageID
	// AttrSubscription is the full name of the subscription it was parked
	// from.
	AttrSubscription = parking.AttrSubscription
	// AttrPublishTime is when it was first published, in RFC 3339 with
	// nanoseconds.
	AttrPublishTime = parking.AttrPublishTime
	// AttrAttempts counts the handler calls the message had before it was
	// parked: 0 for a message parked behind the one that failed.
	AttrAttempts = parking.AttrAttempts
	// AttrError is the error of the message's last call, cut to the
	// service's 1024 bytes; absent for a message that never ran.
	AttrError = parking.AttrError
)

// A ParkedKey is a key parked by [WithParking]: its messages go to the
// parking topic, and none runs until its release ([Subscription.Release],
// [Subscription.RequestRelease]).
type ParkedKey = parking.ParkedKey

// controlRetention is the message retention keyorder gives the parking
// and control topics it creates: the service's maximum, 31 days.
const controlRetention = 31 * 24 * time.Hour

// setupParking creates the parking and control topics of sub when they are
// missing, and checks that they retain messages: releases and replays seek
// back over them.
func setupParking(ctx context.Context, client *pubsub.Client, sub *pubsubpb.Subscription, topicID string) (*parking.Topics, error) {
	if !sub.GetEnableMessageOrdering() {
		return nil, invalid("WithParking: subscription %s has no message ordering", sub.GetName())
	}
	t := &parking.Topics{Park: fullName(client, "topics", topicID)}
	if _, err := retainedTopic(ctx, client, t.Park); err != nil {
		return nil, err
	}
	ret, err := retainedTopic(ctx, client, controllog.Topic(sub.GetName()))
	if err != nil {
		return nil, err
	}
	t.Retention = ret
	if err := probeParking(ctx, client, sub.GetName()); err != nil {
		return nil, err
	}
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

// parkingConfig is what internal/parking needs of s.
func (s *Subscription) parkingConfig() parking.Config {
	return parking.Config{Client: s.client, Name: s.name, Topics: s.parking, Wait: s.cfg.parkingWait, Drain: s.cfg.DrainTimeout,
		Log: s.cfg.Log().With(slog.String("subscription", s.name)), Backoff: s.cfg.Backoff}
}

// Parked lists the keys parked now, oldest first, as every process
// receiving the subscription sees them: from the running Receive, once it
// has caught up with the control log, or else from a replay of the log.
// It returns an error matching [ErrNoParking] without [WithParking], and
// ctx.Err() if ctx ends first.
//
// Parked returns by its ctx, whatever the control topic does: if ctx ends
// before the running Receive has caught up, it returns the keys as that
// Receive last saw them, with ctx.Err(); without a Receive, it returns
// ctx.Err() within about a second, as a replay that did not finish knows
// nothing whole.
func (s *Subscription) Parked(ctx context.Context) (_ []ParkedKey, err error) {
	defer func() { err = ended(ctx, "listing parked keys", err) }()
	if s == nil {
		return nil, invalid("Parked on a nil Subscription")
	}
	if s.parking == nil {
		return nil, ErrNoParking
	}
	return parking.Parked(ctx, s.parkingConfig(), s.parkNow.Load())
}

// Release runs key's parked messages through the handler, in the order
// they were parked, each exactly once, then unparks the key: its later
// messages run as they come, and those that went to the parking topic
// meanwhile run first. It returns nil once the key is unparked.
//
// Where a Receive runs on s, the release runs in it: the handler calls run
// on the calling goroutine, one at a time, with the retries, backoff and
// attempts of any message; they count against no worker of [WithWorkers].
// Where none runs on s, as in an operator's command, Release asks for the
// release as [Subscription.RequestRelease] does and waits while a Receive
// of the subscription, on any process, carries it out: through its
// handler, in the same order. If ctx ends first, Release returns ctx.Err()
// and the request stays recorded, for a Receive to carry out.
//
// Each message's success is recorded in the control log before the next
// one runs, so a release stopped in the middle (its ctx ends, Receive
// stops, the process dies) loses and reorders nothing: the key stays
// parked with what is left, which a later release, on any process, runs.
// A message whose handler succeeded but whose record was lost with the
// process runs again then, as an unacked message would.
//
// If a parked message fails for good again, the release stops there, the
// key stays parked, and Release returns an error matching
// [ErrParkedAgain] and wrapping the handler's error (where no Receive runs
// on s, an error with its text, as the log keeps it).
//
// Release returns an error matching [ErrNotParked] when the key is not
// parked, at once, which also matches [ErrReleased] if a release unparked
// it within the last hour; [ErrNoParking] without [WithParking]; and ctx.Err()
// when ctx ends first. Where a Receive runs on s, it also returns
// [ErrNotReceiving] when that Receive stops during the release, and
// [ErrReleasing] when another release of the key runs, here or on another
// process (one whose process died is taken over after 30 s without a sign
// of life); where none runs, Release waits for such a release to end, and
// returns an error matching [ErrWithdrawn] if its request is withdrawn
// ([Subscription.WithdrawRelease]) before a release of it begins.
func (s *Subscription) Release(ctx context.Context, key string) (err error) {
	defer func() { err = ended(ctx, "releasing", err) }()
	if s == nil {
		return invalid("Release on a nil Subscription")
	}
	if s.parking == nil {
		return ErrNoParking
	}
	return parking.Release(ctx, s.parkingConfig(), s.parkNow.Load(), key)
}

// RequestRelease asks for the release of key's parked messages and returns
// once the request is recorded in the control log, without waiting for
// it to be carried out. A Receive of the subscription, on any process,
// running now or started later, carries it out as [Subscription.Release]
// does: through its handler, in the order the messages were parked, each
// once, then it unparks the key. [Subscription.Parked] shows the request
// ([ParkedKey.ReleaseRequested]) while it is pending.
//
// The request ends when the key is unparked, or when a released message
// fails for good again: the key then stays parked with that message's
// error ([ParkedKey.LastError]), and a new request, after the fix, goes on
// from there. A release that stops because its Receive shuts down, or its
// process dies, leaves the request pending, and the next Receive to see it
// takes it over. A request made while one is pending joins it. Every
// process receiving the subscription must run a version of this package
// that knows requests: an older one ignores them.
//
// RequestRelease works with or without a Receive on s. It returns an error
// matching [ErrNotParked] when the key is not parked (and [ErrReleased]
// too if a release unparked it within the last hour), [ErrNoParking]
// without [WithParking], ctx.Err() if ctx ends first, and the service's
// error if the control log cannot be read or written.
func (s *Subscription) RequestRelease(ctx context.Context, key string) (err error) {
	defer func() { err = ended(ctx, "requesting a release", err) }()
	if s == nil {
		return invalid("RequestRelease on a nil Subscription")
	}
	if s.parking == nil {
		return ErrNoParking
	}
	return parking.RequestRelease(ctx, s.parkingConfig(), s.parkNow.Load(), key)
}

// WithdrawRelease withdraws the release request pending on key (made by
// [Subscription.RequestRelease], or by a [Subscription.Release] where no
// Receive runs), before a Receive carries it out: the key stays parked
// with its messages, and no Receive starts its release, until a new
// request or a Release. It is what an operator does on finding that the
// fix is not deployed after all. A Release waiting on the request returns
// an error matching [ErrWithdrawn].
//
// Once it returns nil, no release of that request runs, whatever arrives
// later: a Receive's claim carries the request it carries out, and the
// control log refuses a claim whose request has ended, so a claim on its
// way when the withdrawal was stored starts nothing.
//
// A release that a Receive has already begun cannot be withdrawn: it
// runs each message once, in order, and only that Receive can stop it,
// by stopping. So WithdrawRelease returns an error matching
// [ErrReleasing] while a release of the key runs, on any process (one
// whose process died is taken over after 30 s without a sign of life, and
// can be withdrawn then). Every process receiving the subscription must
// run a version of this package that knows withdrawals: an older one
// still sees the request pending, and carries it out.
//
// WithdrawRelease works with or without a Receive on s. It returns an
// error matching [ErrNotParked] when the key is not parked, [ErrNoRequest]
// when no request is pending on it, [ErrNoParking] without
// [WithParking], ctx.Err() if ctx ends first, and the service's error if
// the control log cannot be read or written.
func (s *Subscription) WithdrawRelease(ctx context.Context, key string) (err error) {
	defer func() { err = ended(ctx, "withdrawing a release request", err) }()
	if s == nil {
		return invalid("WithdrawRelease on a nil Subscription")
	}
	if s.parking == nil {
		return ErrNoParking
	}
	return parking.WithdrawRelease(ctx, s.parkingConfig(), s.parkNow.Load(), key)
}

package subscriber

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/keyorder/keyorder/ordering"
	"github.com/keyorder/keyorder/subscriber/internal/engine"
	"github.com/keyorder/keyorder/subscriber/internal/parking"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// ErrNotFound is returned, wrapped with the resource's name, by [Open]
// when the subscription does not exist, and by [Replay] and
// [SetTopicRetention] when the topic does not.
var ErrNotFound = errors.New("keyorder/subscriber: not found")

// ErrTopicMismatch is returned by [CreateWithTopic] when the subscription
// exists but is attached to another topic (or to a deleted one).
var ErrTopicMismatch = errors.New("keyorder/subscriber: subscription is attached to another topic")

// ErrReceiving is returned by [Subscription.Receive] when another Receive
// on the same Subscription is still running.
var ErrReceiving = errors.New("keyorder/subscriber: Receive already running on this subscription")

// PanicError is the error a handler's panic becomes: Value is what the
// handler panicked with, Stack its goroutine's stack at the panic. It is
// retried and reported like any handler error (S5).
type PanicError = engine.PanicError

// ErrInvalidConfig is returned, wrapped with the offending value, by
// [CreateWithTopic] and [Open] when an [Option] or an argument is out of
// its documented range.
var ErrInvalidConfig = errors.New("keyorder/subscriber: invalid configuration")

// ErrHandlerExited is the error a handler call ends with when it calls
// runtime.Goexit, as t.FailNow does in a test: the call did not return, so
// the message is not processed. It is retried and reported like any
// handler error (S5, S11).
var ErrHandlerExited = engine.ErrHandlerExited

// Permanent wraps err to tell Receive that retrying the message cannot
// help: the failure policy applies at once, without the retries that
// [WithMaxAttempts] allows (S5). Permanent(nil) is nil.
//
//	if errors.Is(err, errMalformed) {
//		return subscriber.Permanent(err)
//	}
func Permanent(err error) error {
	if err == nil {
		return nil
	}
	return &PermanentError{Err: err}
}

// PermanentError is the error [Permanent] returns.
type PermanentError = engine.PermanentError

// RetryAfter wraps err to tell Receive to call the handler for the message
// again after d, for example when a downstream service answered 429 with a
// Retry-After header. The message's key waits for d without holding a
// worker, and the call does not count against [WithMaxAttempts]: the
// message is not at fault. d is at least 1 ms. RetryAfter(d, nil) is nil.
func RetryAfter(d time.Duration, err error) error {
	if err == nil {
		return nil
	}
	return &RetryAfterError{Delay: max(d, time.Millisecond), Err: err}
}

// RetryAfterError is the error [RetryAfter] returns.
type RetryAfterError = engine.RetryAfterError

// ErrNoRetention is returned, wrapped with the topic's name, by [Replay]
// for a topic without message retention. Seeking a subscription on such a
// topic succeeds but brings back nothing published before the
// subscription existed, so a replay would look complete and be empty.
// [WithTopicRetention] makes [CreateWithTopic] create topics that retain
// their messages, and [SetTopicRetention] gives an existing topic
// retention.
var ErrNoRetention = errors.New("keyorder/subscriber: topic has no message retention")

// ErrBeforeRetention is returned, wrapped with the topic's retention, by
// [Replay] when it is asked to start earlier than the topic's message
// retention reaches: the older messages are gone. A zero start reads from
// the oldest message retained.
var ErrBeforeRetention = errors.New("keyorder/subscriber: replay starts before the topic's retention")

// ReplayError is the error [Replay] returns when its handler fails: it
// names the message, and wraps the handler's error (a *[PanicError] for a
// panic, [ErrHandlerExited] for runtime.Goexit).
type ReplayError struct {
	MessageID   string
	Key         string
	PublishTime time.Time
	// Producer and Seq are the message's stamp; zero if it has none.
	Producer string
	Seq      uint64
	Err      error
}

func (e *ReplayError) Error() string {
	stamp := ""
	if e.Seq != 0 {
		stamp = fmt.Sprintf(", %s of %s", ordering.FormatSeq(e.Seq), e.Producer)
	}
	// The handler's error already says it comes from this package.
	cause := strings.TrimPrefix(fmt.Sprint(e.Err), errPrefix)
	return fmt.Sprintf("%sreplay stopped at message %s (key %q%s, published %s): %s",
		errPrefix, e.MessageID, e.Key, stamp, e.PublishTime.Format(time.RFC3339Nano), cause)
}

// errPrefix starts this package's error messages.
const errPrefix = "keyorder/subscriber: "

// Unwrap returns the handler's error.
func (e *ReplayError) Unwrap() error { return e.Err }

// ErrNoParking is returned by [Subscription.Parked],
// [Subscription.Release] and [Subscription.RequestRelease] on a
// Subscription made without [WithParking].
var ErrNoParking = errors.New("keyorder/subscriber: parking is not on (WithParking)")

// ErrNotReceiving is returned by [Subscription.Release] when the Receive
// running on the Subscription, whose handler runs the parked messages,
// stops during the release: the key stays parked with what is left, for a
// later release. Where no Receive runs on the Subscription, Release does
// not return it: it asks for the release through the control log, for a
// Receive of the subscription on any process to carry out.
var ErrNotReceiving = parking.ErrNotReceiving

// ErrNotParked is returned, wrapped with the key, by
// [Subscription.Release] and [Subscription.RequestRelease] for a key that
// is not parked.
var ErrNotParked = parking.ErrNotParked

// ErrReleasing is returned, wrapped with the key, by [Subscription.Release]
// in a running Receive when another release of the key runs, here or on
// another process, or took the release over.
var ErrReleasing = parking.ErrReleasing

// ErrParkedAgain is returned, wrapped with the key, the message and the
// handler's error, by [Subscription.Release] when a parked message fails
// for good again: the release stops there and the key stays parked. A
// Release that waited for another process to carry out its request wraps
// an error with the text of the handler's, as the control log keeps it.
var ErrParkedAgain = parking.ErrParkedAgain

// ErrNoRequest is returned, wrapped with the key, by
// [Subscription.WithdrawRelease] for a parked key with no release request
// pending.
var ErrNoRequest = parking.ErrNoRequest

// ErrReleased is returned, wrapped with the key and [ErrNotParked], by
// [Subscription.Release] and [Subscription.RequestRelease] for a key that
// is not parked because a release unparked it within the last hour: an
// earlier request, by another operator or a command run twice, was
// carried out meanwhile, and what it parked has run.
var ErrReleased = parking.ErrReleased

// ErrWithdrawn is returned, wrapped with the key, by a
// [Subscription.Release] that waited for another process to carry out its
// request, when the request was withdrawn ([Subscription.WithdrawRelease])
// before any release of it began: the key stays parked, nothing of it ran.
var ErrWithdrawn = parking.ErrWithdrawn

// ErrUnsupported is matched, through errors.Is, by the *[UnsupportedError]
// that [CreateWithTopic] and [Open] return with [WithParking], and
// [Replay] returns, when the server lacks a call they need: Google's
// Pub/Sub emulator, for one, refuses Seek to a time on an ordered
// subscription, which parking's control log and Replay read back with.
var ErrUnsupported = errors.New("keyorder/subscriber: the server lacks a call keyorder needs")

// UnsupportedError names the call a server lacks, what needs it, and the
// fix.
type UnsupportedError struct {
	// Call is the missing call, e.g. "Seek to a time on an ordered
	// subscription".
	Call string
	// For is what needs it, e.g. "WithParking".
	For string
	// Err is the server's answer.
	Err error
}

func (e *UnsupportedError) Error() string {
	return fmt.Sprintf("%sthe server does not support %s, which %s needs (%v); use a server that does: Pub/Sub itself, or keyorder's fake (go run ./examples/emulator -fake); go run ./examples/emulator -check ADDR tells what a server supports",
		errPrefix, e.Call, e.For, e.Err)
}

// Is reports whether target is ErrUnsupported.
func (e *UnsupportedError) Is(target error) bool { return target == ErrUnsupported }

// Unwrap returns the server's answer.
func (e *UnsupportedError) Unwrap() error { return e.Err }

// ended returns err as the caller of what should see it: when ctx has
// ended and err is the service's or a wait's word for that (a gRPC
// Canceled or DeadlineExceeded, or a context error), an error matching
// ctx.Err(), wrapped with what was being done and the cause's text, so
// that errors.Is(err, context.Canceled) holds as the docs promise;
// otherwise err as it is.
func ended(ctx context.Context, what string, err error) error {
	if err == nil || ctx.Err() == nil || errors.Is(err, ctx.Err()) {
		return err
	}
	switch status.Code(err) {
	case codes.Canceled, codes.DeadlineExceeded:
	default:
		if !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded) {
			return err
		}
	}
	return fmt.Errorf("%s%s: %w (%v)", errPrefix, what, ctx.Err(), err)
}

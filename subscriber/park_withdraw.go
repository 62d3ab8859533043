package subscriber

import (
	"context"
	"errors"

	"github.com/keyorder/keyorder/subscriber/internal/controllog"
)

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
	if p := s.parkNow.Load(); p != nil {
		// The running Receive's log, once synced, is caught up.
		err := p.sync(ctx)
		if err == nil {
			err = withdrawRequest(ctx, p.log, key)
		}
		if !errors.Is(err, ErrNotReceiving) {
			return err
		}
	}
	lg, err := s.openLog(ctx)
	if err != nil {
		return err
	}
	defer func() { _ = lg.Close() }()
	return withdrawRequest(ctx, lg, key)
}

// withdrawRequest records the withdrawal of the request pending on key's
// park in lg, whose state must be caught up (controllog.Log.Withdraw).
func withdrawRequest(ctx context.Context, lg *controllog.Log, key string) error {
	return fromLog(lg.Withdraw(ctx, key))
}

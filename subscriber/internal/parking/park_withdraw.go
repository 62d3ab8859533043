package parking

import (
	"context"
	"errors"

	"github.com/keyorder/keyorder/subscriber/internal/controllog"
)

// WithdrawRelease is Subscription.WithdrawRelease: it records the
// withdrawal of the request pending on key, in p's log if p, the running
// door's parking, is not nil.
func WithdrawRelease(ctx context.Context, cfg Config, p *Parking, key string) error {
	if p != nil {
		// The running Receive's log, once synced, is caught up.
		err := p.sync(ctx)
		if err == nil {
			err = withdrawRequest(ctx, p.log, key)
		}
		if !errors.Is(err, ErrNotReceiving) {
			return err
		}
	}
	lg, err := openLog(ctx, cfg)
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

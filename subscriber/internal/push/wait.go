package push

import (
	"context"
	"errors"
	"time"

	"github.com/keyorder/keyorder/subscriber/internal/engine"
)

// A push request whose handler asks to wait (subscriber.RetryAfter, as the inbox
// does while a gap's missing number may still come) is retried in place,
// within the request, after the delay, rather than answered 500 at once:
//
//   - The service's retry policy, not the handler, would space the pushes
//     otherwise, down to none at all, and each would count towards a
//     dead-letter policy's limit: a message waiting a second at a time
//     was pushed again and again, spending its deliveries within the wait.
//     So the delay is kept, for up to pushHoldMax in all, within the
//     service's shortest ack deadline (10 s); then the answer is 500, and
//     the next push waits again.
//   - On the delivery that the dead-letter policy would forward, without
//     parking (which parks the key then, judge), the request is held as
//     long as it lives: answered 500, the message would be dead-lettered
//     and its key go on without it, which a failure for good on pull, and
//     with parking on push, never lets happen to a message that only waits.
//     Should the service give up on the request meanwhile, the message is
//     forwarded all the same, and the held call still runs it, once, before
//     the key's next push, which waits for its turn (keyGate).

// pushHoldMax bounds the waits of a push request before it is answered 500,
// except on the delivery a dead-letter policy would forward.
const pushHoldMax = 8 * time.Second

// callWaiting runs j through the call path, and again after each delay its
// handler asks for, as long as the request may be held.
func (e *Endpoint) callWaiting(ctx context.Context, j *engine.Job) engine.Verdict {
	r := e.r
	var held time.Duration
	for {
		v := r.CallInLane(ctx, j) // its handler's context ends with ctx
		var later *engine.RetryAfterError
		if v.Out != engine.Retried || !errors.As(v.Err, &later) {
			return v
		}
		wait := max(v.Delay, r.Cfg.MinBackoff)
		if !r.DeadLettered(j) && held+wait > pushHoldMax {
			return v
		}
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return v
		case <-r.Stopping():
			t.Stop()
			return v
		}
		held += wait
	}
}

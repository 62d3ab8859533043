package parking

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/keyorder/keyorder/subscriber/internal/controllog"
	"github.com/keyorder/keyorder/subscriber/internal/engine"
)

// Release requests. A program that runs no Receive, such as an operator's
// command, asks for a key's release through the control log: a
// release-request event on the key's park, which names who asked. Every
// Receive of the subscription watches the requests pending
// (serveRequests), and claims the release of each one's park when nobody
// holds it; the claim's compare-and-set picks one Receive, which runs the
// release as Release does (park_release.go), through the call path, on a
// goroutine it owns. The request lasts until the park ends or a released
// message fails for good again: a release that stops because its Receive
// shuts down, or its process dies, leaves it for the next Receive. The
// asker may wait for the outcome in the log (awaitRequest).

// RequestRelease is Subscription.RequestRelease: it records a request for
// key's release, in p's log if p, the running door's parking, is not nil.
func RequestRelease(ctx context.Context, cfg Config, p *Parking, key string) error {
	if p != nil {
		// The running Receive's log, once synced, is caught up.
		err := p.sync(ctx)
		if err == nil {
			_, err = recordRequest(ctx, p.log, key)
		}
		if !errors.Is(err, ErrNotReceiving) {
			return err
		}
	}
	return askRelease(ctx, cfg, key, false)
}

// askRelease records a request for key's release in a control log of its
// own and, with wait, waits for its outcome.
func askRelease(ctx context.Context, cfg Config, key string, wait bool) error {
	lg, err := openLog(ctx, cfg)
	if err != nil {
		return err
	}
	defer func() { _ = lg.Close() }()
	req, err := recordRequest(ctx, lg, key)
	if err != nil || !wait {
		return err
	}
	return awaitRequest(ctx, lg, req)
}

// openLog opens the subscription's control log for a program that runs
// no Receive: it replays the log, then follows it until closed.
func openLog(ctx context.Context, cfg Config) (*controllog.Log, error) {
	return controllog.Open(ctx, cfg.Client, cfg.Topics.LogConfig(cfg.Name, oneOffDrain, false))
}

// oneOffDrain is the drain of a one-off Log (controllog.Config.Drain): its
// Close, and the cleanup of an Open that failed, give up on the server a
// second after it, so that Parked, RequestRelease, WithdrawRelease and a
// Release without a Receive return within about a second of their ctx's
// end, whatever the server does. Such a Log has nothing to drain: the
// events that matter, a request or a withdrawal, are recorded (Record)
// before it closes; only its follower's subscription is deleted then,
// which otherwise expires after a day.
const oneOffDrain = 0

// asker names this process in the requests it records: the program, its
// host and its process ID, for an operator to read in Parked.
var asker = sync.OnceValue(func() string {
	prog := "unknown program"
	if len(os.Args) > 0 {
		prog = filepath.Base(os.Args[0])
	}
	host, err := os.Hostname()
	if err != nil {
		host = "unknown host"
	}
	return fmt.Sprintf("%s on %s (pid %d)", prog, host, os.Getpid())
})

// recordRequest records a request for the release of key's park in lg,
// whose state must be caught up (controllog.Log.Ask), and returns it.
func recordRequest(ctx context.Context, lg *controllog.Log, key string) (controllog.Asked, error) {
	req, err := lg.Ask(ctx, key, asker())
	return req, notParked(lg, key, fromLog(err))
}

// notParked adds to err, if it says that key is not parked, that a
// release unparked it lately, when lg says so (ErrReleased).
func notParked(lg *controllog.Log, key string, err error) error {
	if !errors.Is(err, ErrNotParked) {
		return err
	}
	if at, ok := lg.Unparked(key); ok {
		return fmt.Errorf("%w: %q was unparked at %s, its parked messages run: %w", ErrReleased, key, at.UTC().Format(time.RFC3339), ErrNotParked)
	}
	return err
}

// awaitRequest waits for req's outcome in lg (controllog.Log.Await), as
// Release returns it.
func awaitRequest(ctx context.Context, lg *controllog.Log, req controllog.Asked) error {
	err := lg.Await(ctx, req)
	if ended, ok := errors.AsType[*controllog.RequestEnded](err); ok && ended.Withdrawn {
		return fmt.Errorf("%w: %q", ErrWithdrawn, req.Key)
	}
	if ended, ok := errors.AsType[*controllog.RequestEnded](err); ok {
		return fmt.Errorf("%w: %q at message %s: %w", ErrParkedAgain, req.Key, ended.Msg, errors.New(ended.Err))
	}
	if err != nil && ctx.Err() == nil {
		return fmt.Errorf("keyorder/subscriber: %w", err)
	}
	return err
}

// fromLog turns the control log's protocol errors into the subscriber's.
func fromLog(err error) error {
	for _, m := range [...]struct{ log, sub error }{
		{controllog.ErrNotParked, ErrNotParked}, {controllog.ErrNoRequest, ErrNoRequest}, {controllog.ErrReleasing, ErrReleasing},
	} {
		if errors.Is(err, m.log) {
			return fmt.Errorf("%w%s", m.sub, strings.TrimPrefix(err.Error(), m.log.Error()))
		}
	}
	return err
}

// errRequestEnded is what a run of a request ends with when the log
// refused its claim because the request had ended meanwhile (withdrawn,
// or carried out): nothing ran, and there is nothing to try again.
var errRequestEnded = errors.New("keyorder/subscriber: the release request ended before its claim")

// errHandlerExitedRelease is what a release run ends with when a callback
// it ran exited its goroutine.
var errHandlerExitedRelease = fmt.Errorf("keyorder/subscriber: a callback exited the release's goroutine: %w", engine.ErrHandlerExited)

// requestRuns keeps, for the requests whose runs here ended without an
// outcome (an error reading the parking topic, a claim refused), when this
// Receive may try them again: after a backoff that grows with each such
// run in a row.
type requestRuns struct {
	mu       sync.Mutex
	failures map[string]int       // by key; guarded by mu
	retryAt  map[string]time.Time // by key; guarded by mu
}

// after returns when key may be tried again, zero if at any time.
func (rt *requestRuns) after(key string) time.Time {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	return rt.retryAt[key]
}

// ended records the end of a run of key's request: with retry, one to try
// again after backoff(failures in a row).
func (rt *requestRuns) ended(key string, retry bool, backoff func(int) time.Duration) {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	if !retry {
		delete(rt.failures, key)
		delete(rt.retryAt, key)
		return
	}
	if rt.failures == nil {
		rt.failures, rt.retryAt = map[string]int{}, map[string]time.Time{}
	}
	rt.failures[key]++
	rt.retryAt[key] = time.Now().Add(backoff(rt.failures[key]))
}

// forgetBut forgets the keys whose requests are no longer pending.
func (rt *requestRuns) forgetBut(pending []controllog.PendingRelease) {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	if len(rt.failures) == 0 {
		return
	}
	keep := make(map[string]bool, len(pending))
	for _, p := range pending {
		keep[p.Key] = true
	}
	for key := range rt.failures {
		if !keep[key] {
			delete(rt.failures, key)
			delete(rt.retryAt, key)
		}
	}
}

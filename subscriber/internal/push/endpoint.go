package push

import (
	"context"
	"errors"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"cloud.google.com/go/pubsub/v2"
	"google.golang.org/api/idtoken"

	"github.com/keyorder/keyorder/subscriber/internal/engine"
)

// Push delivery: the service POSTs each message to an HTTPS endpoint of
// the service's own, and the answer's status is the ack. On an ordered
// push subscription the service keeps at most one message of a key
// outstanding, so a key's next message waits until the endpoint has
// answered the previous one with a success: order holds as long as the
// endpoint answers correctly. PushHandler is that endpoint
// (Endpoint). It runs the handler through the same call path as
// Receive (the engine's Call, through its PushDoor, which counts the
// outcome), and delivers the outcome as the status:
//
//   - 204 No Content acks: the handler succeeded, or the message was
//     processed already (S6, S12), or, with parking, it was parked.
//   - 500 Internal Server Error nacks a failed call: the service sends the
//     message again after its retry policy's backoff, before any later
//     message of its key. Attempts are counted across these deliveries, as
//     on pull; when they run out, or the handler returns Permanent, the
//     message fails for good: with parking, its key parks and the answer is
//     204; otherwise the answer stays 500, the key waits on it (S5), and a
//     dead-letter policy, if the subscription has one, forwards it.
//   - 503 Service Unavailable nacks a request that came after Close.
//   - 400, 401, 403 and 405 refuse a malformed request, a missing or bad
//     token, another account's token and a method other than POST; the
//     handler never runs.
//
// The answer waits for the handler, so the subscription's ack deadline
// bounds a call; one that outlasts it is cancelled by the service and sent
// again. The service's retry policy spaces the pushes of a failed message;
// a subscriber.RetryAfter's delay is kept within the request, up to
// pushHoldMax in all, and on the delivery a dead-letter policy would
// forward, as long as the request lasts (engine.PushDoor.Call). Attempts
// are counted per endpoint process: a message pushed again to another
// instance starts its count afresh there, so WithMaxAttempts bounds the
// calls per instance; the service's own count, with a dead-letter policy,
// is Delivery.DeliveryAttempt.

// Config is what a push endpoint needs of its subscription.
type Config struct {
	Name      string             // the subscription's full name
	Ordered   bool               // it has message ordering
	Settings  Settings           // its push configuration
	Validator *idtoken.Validator // WithTokenValidator's; nil for the production one
	// Parking is the endpoint's parking, with WithParking; nil without.
	Parking Parking
	// Closed is called once Close has stopped everything.
	Closed func()
}

// Parking is what a push endpoint sees of its parking
// (internal/parking: push.go): it waits for the control log to be up, and drains,
// cancels and closes it with the endpoint.
type Parking interface {
	// Await returns the parking once it is up, or an error if ctx ends
	// first, the endpoint closes (ErrShuttingDown), or the log was lost
	// (ErrParkingLost).
	Await(ctx context.Context) (Parked, error)
	// Told tells of key parked by a push, once its answer is written.
	Told(key string, cause *engine.ParkCause, since time.Time)
	Drain()  // waits, at Close, for the releases running in the endpoint
	Cancel() // gives up on what parking has under way, once Close has waited the drain
	Close()  // stops the control log, once the endpoint has drained
}

// Parked is a push's steps through parking, once it is up.
type Parked interface {
	// Ops ends when Close gives up on the drain: a move to the parking
	// topic ends then.
	Ops() context.Context
	// DivertPush moves j, a keyed push, to the parking topic if its key
	// is parked, after the barrier, and reports whether it did.
	DivertPush(ctx context.Context, j *engine.Job) (bool, error)
	// ParkPush parks j's key, j having failed for good with err, and
	// reports whether j was parked, and the cause to tell of if this call
	// parked the key.
	ParkPush(ctx context.Context, j *engine.Job, err error) (bool, *engine.ParkCause, error)
}

// pushHoldMax bounds the waits of a push request before it is answered
// 500, within the service's shortest ack deadline (10 s), except on the
// delivery a dead-letter policy would forward (engine.PushDoor.Call says
// why it waits).
const pushHoldMax = 8 * time.Second

// New makes the push endpoint of the engine whose push door is door, by
// cfg.
func New(cfg Config, door *engine.PushDoor) *Endpoint {
	return &Endpoint{cfg: cfg, door: door, tokens: newTokenChecker(cfg.Validator), parking: cfg.Parking}
}

// An Endpoint is the push endpoint: the HTTP side of push (tokens,
// requests, answers, Close). Each of its requests runs through the call
// path in its key's lane (engine.PushDoor), and the endpoint answers with
// the outcome.
type Endpoint struct {
	cfg  Config
	door *engine.PushDoor
	// tokens checks the requests' tokens (auth.go).
	tokens *tokenChecker

	// parking keeps the control log, with WithParking (internal/parking: push.go); keys
	// runs a key's pushes one at a time.
	parking Parking
	keys    keyGate
	hints   pushHints

	// calls counts the requests at work; a request joins it under mu
	// unless closed is set, which shut sets under mu before it waits; a
	// request that finds it set is refused at once. closeOnce starts shut
	// once, which closes finished when all it stops has ended.
	mu        sync.Mutex
	closed    atomic.Bool
	calls     sync.WaitGroup
	closeOnce sync.Once
	finished  chan struct{}
}

// ServeHTTP answers one push request. A refusal reads no more of the body
// than it must, and closes an HTTP/1 connection (refuse).
func (e *Endpoint) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	if req.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		refuse(w, req, http.StatusMethodNotAllowed, "push requests are POSTs")
		return
	}
	if e.closed.Load() {
		refuse(w, req, http.StatusServiceUnavailable, "shutting down")
		return
	}
	e.hintToken(req)
	if code, err := e.authorize(req); err != nil {
		e.door.Refused(req.Context(), code, err)
		refuse(w, req, code, http.StatusText(code))
		return
	}
	m, err := decodePush(req, e.cfg.Name, e.cfg.Settings)
	if err != nil {
		e.door.Refused(req.Context(), http.StatusBadRequest, err)
		refuse(w, req, http.StatusBadRequest, err.Error())
		return
	}
	e.hintKey(m)
	acked, parkedIt, err := e.run(req, m)
	switch {
	case err != nil:
		http.Error(w, err.Error(), http.StatusServiceUnavailable)
	case acked:
		w.WriteHeader(http.StatusNoContent)
	default:
		http.Error(w, "handler failed", http.StatusInternalServerError)
	}
	if parkedIt != nil {
		// Told once the answer is written (S11).
		e.parking.Told(m.OrderingKey, parkedIt, time.Now())
	}
}

// run takes m through the call path on a goroutine of its own, so that a
// handler that exits its goroutine still gets its request answered (S11),
// and through parking's steps with WithParking, and returns whether the
// answer acks m, with the park this request made, if it made one, to be
// told once the answer is written; or an error, for a 503, when the door
// is closed, parking is not up, or the call was stopped by Close.
func (e *Endpoint) run(req *http.Request, m *pubsub.Message) (bool, *engine.ParkCause, error) {
	ctx := req.Context()
	if !e.enter() {
		return false, nil, ErrShuttingDown
	}
	defer e.calls.Done()
	var p Parked
	if e.parking != nil {
		var err error
		switch p, err = e.parking.Await(ctx); {
		case errors.Is(err, ErrParkingLost) && m.OrderingKey == "":
			p = nil // a message without a key has no order to keep: parking does not govern it
		case err != nil:
			return false, nil, err
		}
	}
	if p != nil {
		// A move to the parking topic ends with the request, or when Close
		// gives up on the drain.
		var stop context.CancelFunc
		ctx, stop = context.WithCancel(ctx)
		defer stop()
		defer context.AfterFunc(p.Ops(), stop)()
	}
	if m.OrderingKey != "" {
		done, err := e.keys.enter(ctx, m.OrderingKey)
		if err != nil {
			return false, nil, err
		}
		defer done()
	}
	return e.push(ctx, p, m)
}

// push runs m, its key's only push at work, through the call path, and
// through parking's steps if p is not nil: a push of a parked key moves
// to the parking topic, and one that fails for good parks its key.
func (e *Endpoint) push(ctx context.Context, p Parked, m *pubsub.Message) (bool, *engine.ParkCause, error) {
	j := e.door.Arrive(ctx, m)
	if p != nil && m.OrderingKey != "" {
		parked, err := p.DivertPush(ctx, j)
		if err != nil {
			return false, nil, err
		}
		if parked {
			e.door.Parked(j)
			return true, nil, nil
		}
	}
	var cause *engine.ParkCause
	var park func(error) bool
	if p != nil {
		park = func(failed error) bool {
			parked, parkedIt, err := p.ParkPush(ctx, j, failed)
			if parked {
				cause = parkedIt
				return true
			}
			e.door.Log().Warn("keyorder/subscriber: could not park a pushed message; the service will push it again",
				"key", m.OrderingKey, "error", err)
			return false
		}
	}
	acked, err := e.door.Call(ctx, j, pushHoldMax, park)
	if err != nil {
		return false, nil, err
	}
	return acked, cause, nil
}

// enter counts a request at work, unless the door is closed.
func (e *Endpoint) enter() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed.Load() {
		return false
	}
	e.calls.Add(1)
	return true
}

// ErrShuttingDown is what a push is answered 503 with once Close has
// begun.
var ErrShuttingDown = errors.New("shutting down")

// ErrParkingLost is what a keyed push is answered 503 with, once the
// endpoint's parking control log is no longer followed.
var ErrParkingLost = errors.New("keyorder/subscriber: the parking control log is no longer followed")

// Settings are a subscription's own push configuration.
type Settings struct {
	Endpoint string // "" for a pull subscription
	Email    string // the OIDC token's account; "" for none
	Audience string // the token's audience: its own, or the endpoint's URL
	Wrapped  bool   // the body is the JSON envelope, not the bare data
	Metadata bool   // unwrapped, with the metadata as headers
}

// Close refuses new requests, lets running ones drain, with the releases
// and the moves to the parking topic, until the drain timeout, then
// cancels what runs, and stops the receiver. It returns nil once all that
// has ended, or ctx.Err() when ctx ends first, whatever is still under
// way: that goes on ending behind it, and a later close may wait for it.
func (e *Endpoint) Close(ctx context.Context) error {
	e.closeOnce.Do(func() {
		e.finished = make(chan struct{})
		go e.shut(ctx)
	})
	select {
	case <-e.finished:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// shut is close's work, on a goroutine of its own: ctx, the first close's,
// may cut the drain short (engine.PushDoor.Stop).
func (e *Endpoint) shut(ctx context.Context) {
	defer close(e.finished)
	e.mu.Lock()
	e.closed.Store(true)
	e.mu.Unlock()
	drain := func() {
		var wg sync.WaitGroup
		wg.Go(e.calls.Wait)
		if e.parking != nil {
			wg.Go(e.parking.Drain)
		}
		wg.Wait()
	}
	cancel, closed := func() {}, func() {}
	if e.parking != nil {
		cancel, closed = e.parking.Cancel, e.parking.Close
	}
	e.door.Stop(ctx, drain, cancel, closed)
	e.cfg.Closed()
}

// authorize checks the request's token when the subscription has push
// authentication, and returns the status to refuse it with.
func (e *Endpoint) authorize(req *http.Request) (int, error) {
	p := e.cfg.Settings
	if p.Email == "" {
		return 0, nil // accepted when made, with WithUnauthenticatedPush
	}
	return e.tokens.check(req, p.Email, p.Audience)
}

// pushHints logs, once each per endpoint, what a push request tells of a
// server that does not push as the service does, so that an endpoint that
// answers 401 to everything, or runs keys unordered, says why. Google's
// emulator, for one, sends neither a token nor the ordering key.
type pushHints struct {
	token, key sync.Once
}

// hintToken logs a hint, the first time, when req carries no token and
// the endpoint needs one (WithPushAuth).
func (d *Endpoint) hintToken(req *http.Request) {
	if d.cfg.Settings.Email == "" || req.Header.Get("Authorization") != "" {
		return
	}
	d.hints.token.Do(func() {
		d.door.Log().Warn("keyorder/subscriber: a push request carries no token; every such request is refused 401",
			"hint", "the server does not sign its pushes (Google's emulator does not): on it, make the subscription with WithUnauthenticatedPush; on Pub/Sub, give the push subscription the service account of WithPushAuth")
	})
}

// hintKey logs a hint, the first time, when a push to an ordered
// subscription carries no ordering key.
func (d *Endpoint) hintKey(m *pubsub.Message) {
	if !d.cfg.Ordered || m.OrderingKey != "" {
		return
	}
	d.hints.key.Do(func() {
		d.door.Log().Info("keyorder/subscriber: a push to an ordered subscription carries no ordering key; it runs unordered",
			"message_id", m.ID,
			"hint", "if it was published with one, the server does not push ordering keys (Google's emulator does not), and keys cannot be kept in order through it")
	})
}

// keyGate runs the pushes of one key one at a time. The service keeps one
// message of a key outstanding, but a push whose answer came too late is
// pushed again while its first call may still run; the second waits for
// the first, then finds it processed (S6) or runs it again after it.
type keyGate struct {
	mu   sync.Mutex
	busy map[string]chan struct{} // closed when the key's push ends
}

// enter waits until no other push of key runs, and returns the function
// that ends this one; or ctx.Err().
func (g *keyGate) enter(ctx context.Context, key string) (func(), error) {
	for {
		g.mu.Lock()
		ch, taken := g.busy[key]
		if !taken {
			if g.busy == nil {
				g.busy = map[string]chan struct{}{}
			}
			ch = make(chan struct{})
			g.busy[key] = ch
			g.mu.Unlock()
			return func() {
				g.mu.Lock()
				delete(g.busy, key)
				g.mu.Unlock()
				close(ch)
			}, nil
		}
		g.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

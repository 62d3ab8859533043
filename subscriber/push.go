package subscriber

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	"cloud.google.com/go/pubsub/v2"

	"github.com/keyorder/keyorder/subscriber/internal/engine"
)

// Push delivery: the service POSTs each message to an HTTPS endpoint of
// the service's own, and the answer's status is the ack. On an ordered
// push subscription the service keeps at most one message of a key
// outstanding, so a key's next message waits until the endpoint has
// answered the previous one with a success: order holds as long as the
// endpoint answers correctly. PushHandler is that endpoint
// (pushEndpoint). It runs the handler through the same call path as
// Receive (call.go), and its door, pushAnswer, delivers the path's verdict
// as the status:
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
// a [RetryAfter]'s delay is kept within the request, up to 8 s in all, and
// on the delivery a dead-letter policy would forward, as long as the
// request lasts (push_wait.go). Attempts are counted per endpoint
// process: a message pushed again to another instance starts its count
// afresh there, so WithMaxAttempts bounds the calls per instance; the
// service's own count, with a dead-letter policy, is
// Delivery.DeliveryAttempt.

// PushHandler returns the HTTP handler of the subscription's push
// endpoint. It runs h for each message the service pushes, through the
// same path as [Subscription.Receive]: the same [Delivery] (key, headers,
// stamp, attempt), the ID window (S6), the sequence check (S12), attempts
// and failure decisions (S5), parking, metrics and logs. The status it
// answers is the ack: 204 when h succeeded (S4) or the message was
// processed already, 500 when h failed, so that the service sends the
// message again before any later message of its key.
//
// With push authentication, each request must carry a valid Google-signed
// OIDC token of the subscription's service account, with a verified
// email: its header the one the service signs with (RS256, a key of
// Google's OIDC key set), then its signature, expiry, audience and issuer,
// and its iat and nbf not over a minute ahead. Otherwise the answer is
// 401, or 403 for another account's token, and h does not run. A body
// that is not a push request of this subscription gets 400, and so does
// one the service would never send, before anything of it is kept: a
// message ID over 64 bytes, a key that fails [ordering.Validate],
// attributes over P6's limits, an envelope with a field twice or in other
// letter case, an unwrapped request without its subscription header. A
// method other than POST gets 405. Every refusal (405, 401, 403, 400, and
// 503 after Close) is answered without reading the body, and on HTTP/1
// closes the connection. DESIGN.md's "Security model" says what a token
// proves.
//
// Serve the handler from an http.Server with a ReadTimeout (a body is at
// most 14 MB, the service's 10 MB in base64: a minute suits most links),
// a WriteTimeout longer than the subscription's ack deadline (the answer
// waits for h), and an IdleTimeout; ReadHeaderTimeout alone lets a client
// hold a connection by sending a body slowly. A request at work holds its
// body: the service's push flow control bounds its own, and a bound in
// front bounds the rest, on connections (netutil.LimitListener of
// golang.org/x/net) or on requests at work (a semaphore around the
// handler).
//
// Mount the one handler on as many routes as needed: PushHandler may be
// called once per Subscription, and panics if called again, if h is nil,
// or on a pull subscription. No Receive runs beside it. [Subscription.Close]
// stops it.
func (s *Subscription) PushHandler(h Handler) http.Handler {
	switch {
	case s == nil:
		panic("subscriber: PushHandler on a nil Subscription")
	case h == nil:
		panic("subscriber: PushHandler with a nil Handler")
	case s.push.endpoint == "":
		panic(fmt.Sprintf("subscriber: PushHandler on %s, a pull subscription", s.name))
	case !s.receiving.CompareAndSwap(false, true):
		panic(fmt.Sprintf("subscriber: PushHandler called twice on %s, or while Receive runs", s.name))
	}
	r, err := s.newReceiver(context.Background(), h)
	if err != nil {
		panic(err) // the options were checked when s was made
	}
	e := &pushEndpoint{s: s, r: r, tokens: newTokenChecker(s.cfg.push.validator)}
	if s.parking != nil {
		e.parking = startPushParking(s, r) // stores s.current once up
	} else {
		s.current.Store(r)
	}
	s.pushing.Store(e)
	return e
}

// Close stops what [Subscription.PushHandler] runs: requests that arrive
// afterwards are answered 503, so that the service sends them again, to
// this endpoint or another; running handler calls, releases and moves to
// the parking topic finish until the drain timeout ([WithDrainTimeout]) or
// until ctx ends, whichever comes first; then their context is cancelled,
// and with parking the control log stops. Close returns nil once all of
// that has ended, or ctx.Err() as soon as ctx ends, whatever is still
// under way, which goes on ending behind it; a later Close waits for it
// again, by its own ctx. At a service's shutdown, call
// http.Server.Shutdown first, which lets running pushes finish and
// answer, then Close. A Subscription that only receives
// by pull has nothing to close: the end of Receive's context stops
// Receive, and Close returns nil.
func (s *Subscription) Close(ctx context.Context) error {
	if s == nil {
		return invalid("Close on a nil Subscription")
	}
	e := s.pushing.Load()
	if e == nil {
		return nil
	}
	return e.close(ctx)
}

// A pushEndpoint is the push endpoint: the HTTP side of push (tokens,
// requests, answers, Close). Each of its requests runs through the call
// path with a door of its own, pushAnswer, and the endpoint answers with
// the verdict it delivers.
type pushEndpoint struct {
	s *Subscription
	r *engine.Engine
	// tokens checks the requests' tokens (push_auth.go).
	tokens *tokenChecker

	// parking keeps the control log, with WithParking (push_park.go); keys
	// runs a key's pushes one at a time.
	parking *pushParking
	keys    keyGate
	hints   pushHints

	// calls counts the requests at work; a request joins it under mu
	// unless closed is set, which close sets under mu before it waits.
	// closeOnce starts shut once, which closes finished when all it
	// stops has ended.
	mu        sync.Mutex
	closed    bool
	calls     sync.WaitGroup
	closeOnce sync.Once
	finished  chan struct{}
}

// ServeHTTP answers one push request. A refusal reads no more of the body
// than it must, and closes an HTTP/1 connection (refuse).
func (e *pushEndpoint) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	r := e.r
	if req.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		refuse(w, req, http.StatusMethodNotAllowed, "push requests are POSTs")
		return
	}
	select {
	case <-r.Stopping:
		refuse(w, req, http.StatusServiceUnavailable, "shutting down")
		return
	default:
	}
	e.hintToken(req)
	if code, err := e.authorize(req); err != nil {
		r.Obs.PushRefused(req.Context(), code, err)
		refuse(w, req, code, http.StatusText(code))
		return
	}
	m, err := decodePush(req, e.s.name, e.s.push)
	if err != nil {
		r.Obs.PushRefused(req.Context(), http.StatusBadRequest, err)
		refuse(w, req, http.StatusBadRequest, err.Error())
		return
	}
	e.hintKey(m)
	out, parkedIt, err := e.run(req, m)
	switch {
	case err != nil:
		http.Error(w, err.Error(), http.StatusServiceUnavailable)
	case out.Acks():
		w.WriteHeader(http.StatusNoContent)
	case out == engine.Shutdown:
		http.Error(w, "shutting down", http.StatusServiceUnavailable)
	default:
		http.Error(w, "handler failed", http.StatusInternalServerError)
	}
	if parkedIt != nil {
		// Told once the answer is written (S11).
		e.parking.parked.told(KeyParked, m.OrderingKey, parkedIt, time.Now(), "")
	}
}

// run takes m through the call path on a goroutine of its own, so that a
// handler that exits its goroutine still gets its request answered (S11),
// and through parking's steps with WithParking, and returns the outcome
// the answer reports, with the park this request made, if it made one,
// to be told once the answer is written; or an error, for a 503, when the
// door is closed or parking is not up.
func (e *pushEndpoint) run(req *http.Request, m *pubsub.Message) (engine.Outcome, *engine.ParkCause, error) {
	r, ctx := e.r, req.Context()
	if !e.enter() {
		return 0, nil, errShuttingDown
	}
	defer e.calls.Done()
	var p *parking
	if e.parking != nil {
		var err error
		switch p, err = e.parking.await(ctx); {
		case errors.Is(err, errParkingLost) && m.OrderingKey == "":
			p = nil // a message without a key has no order to keep: parking does not govern it
		case err != nil:
			return 0, nil, err
		}
	}
	if p != nil {
		// A move to the parking topic ends with the request, or when Close
		// gives up on the drain.
		var stop context.CancelFunc
		ctx, stop = context.WithCancel(ctx)
		defer stop()
		defer context.AfterFunc(p.ops, stop)()
	}
	if m.OrderingKey != "" {
		done, err := e.keys.enter(ctx, m.OrderingKey)
		if err != nil {
			return 0, nil, err
		}
		defer done()
	}
	e.s.counts.Received.Add(1)
	j := r.Arrived(ctx, m)
	j.D.DeliveryAttempt = j.DeliveryAttempt()
	j.RetriesByNack = true // S5: the service's backoff spaces the retries
	if p != nil && j.D.Key != "" {
		parked, err := p.divertPush(ctx, j)
		if err != nil {
			return 0, nil, err
		}
		if parked {
			return e.parked(j), nil, nil
		}
	}
	v := e.callWaiting(ctx, j) // push_wait.go: a RetryAfter's delay is kept
	if v.Out == engine.Parked {
		parked, cause, err := p.parkPush(ctx, j, v.Err)
		if parked {
			return e.parked(j), cause, nil
		}
		r.Obs.Log.Warn("keyorder/subscriber: could not park a pushed message; the service will push it again",
			"key", j.D.Key, "error", err)
	}
	return e.deliver(j, v), nil, nil
}

// enter counts a request at work, unless the door is closed.
func (e *pushEndpoint) enter() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return false
	}
	e.calls.Add(1)
	return true
}

// call runs j through the call path on a goroutine of its own, the key's
// lane showing it running meanwhile (lane.pushed), and returns the
// verdict. The handler's context ends with the request, as the service
// stops waiting for the answer then, or with the door's drain.
func (e *pushEndpoint) call(ctx context.Context, j *engine.Job) engine.Verdict {
	r := e.r
	life, cancel := context.WithCancel(r.HandlerCtx)
	defer cancel()
	defer context.AfterFunc(ctx, cancel)()
	j.Life = life
	answer := make(chan engine.Verdict, 1)
	go r.Call(j, pushAnswer{l: r.Lanes.Pushing(r, j), answer: answer})
	return <-answer
}

// parked settles j as moved to the parking topic.
func (e *pushEndpoint) parked(j *engine.Job) engine.Outcome {
	var fx engine.Effects
	e.r.Parked(&fx, j)
	e.r.Count(j, engine.Parked) // nothing to ack: the answer acks it
	return engine.Parked
}

var errShuttingDown = errors.New("shutting down")

// pushAnswer is the door of one push request: it ends the call in the
// key's lane, where the held-key record notes the verdict, and hands the
// verdict to the request's goroutine, which delivers it as its answer.
// Key events are told last, once the answer can be written, so that a
// callback that exits the goroutine leaves nothing undone.
type pushAnswer struct {
	l      *engine.Lane
	answer chan<- engine.Verdict
}

func (a pushAnswer) Settle(j *engine.Job, v engine.Verdict) {
	fx := a.l.Pushed(j, v)
	a.answer <- v
	a.l.R.Apply(a.l, &fx)
}

// deliver turns the verdict on j into the outcome the answer reports, and
// counts it as Receive counts its settlements: a success or a copy acks,
// a failure nacks, for the service to push the message again, or to
// dead-letter it.
func (e *pushEndpoint) deliver(j *engine.Job, v engine.Verdict) engine.Outcome {
	out := v.Out
	if out.ForGood() {
		out = engine.Failed // not parked: nacked, for the service to push again or dead-letter
	}
	e.r.Count(j, out)
	return out
}

// close refuses new requests, lets running ones drain, with the releases
// and the moves to the parking topic, until the drain timeout, then
// cancels what runs, and stops the receiver. It returns nil once all that
// has ended, or ctx.Err() when ctx ends first, whatever is still under
// way: that goes on ending behind it, and a later close may wait for it.
func (e *pushEndpoint) close(ctx context.Context) error {
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
// may cut the drain short.
func (e *pushEndpoint) shut(ctx context.Context) {
	defer close(e.finished)
	r := e.r
	r.Ending.Begin(r.Cfg.DrainTimeout) // bounds the waits for the server (ShutdownBound)
	defer r.Ending.End()
	e.mu.Lock()
	e.closed = true
	e.mu.Unlock()
	close(r.Stopping)
	drained := make(chan struct{})
	go func() {
		defer close(drained)
		var wg sync.WaitGroup
		wg.Go(e.calls.Wait)
		if e.parking != nil {
			wg.Go(e.parking.drain)
		}
		wg.Wait()
	}()
	t := time.NewTimer(r.Cfg.DrainTimeout)
	defer t.Stop()
	select {
	case <-drained:
	case <-t.C:
	case <-ctx.Done():
	}
	r.CancelHandlers()
	if e.parking != nil {
		e.parking.cancel()
	}
	<-drained
	if e.parking != nil {
		e.parking.close()
	}
	r.Obs.Close()
	e.s.current.Store(nil)
	e.s.parkNow.Store(nil)
}

// authorize checks the request's token when the subscription has push
// authentication, and returns the status to refuse it with.
func (e *pushEndpoint) authorize(req *http.Request) (int, error) {
	s := e.s
	if s.push.email == "" {
		return 0, nil // accepted when made, with WithUnauthenticatedPush
	}
	return e.tokens.check(req, s.push.email, s.push.audience)
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
func (d *pushEndpoint) hintToken(req *http.Request) {
	if d.s.push.email == "" || req.Header.Get("Authorization") != "" {
		return
	}
	d.hints.token.Do(func() {
		d.r.Obs.Log.Warn("keyorder/subscriber: a push request carries no token; every such request is refused 401",
			"hint", "the server does not sign its pushes (Google's emulator does not): on it, make the subscription with WithUnauthenticatedPush; on Pub/Sub, give the push subscription the service account of WithPushAuth")
	})
}

// hintKey logs a hint, the first time, when a push to an ordered
// subscription carries no ordering key.
func (d *pushEndpoint) hintKey(m *pubsub.Message) {
	if !d.s.ordered || m.OrderingKey != "" {
		return
	}
	d.hints.key.Do(func() {
		d.r.Obs.Log.Info("keyorder/subscriber: a push to an ordered subscription carries no ordering key; it runs unordered",
			"message_id", m.ID,
			"hint", "if it was published with one, the server does not push ordering keys (Google's emulator does not), and keys cannot be kept in order through it")
	})
}

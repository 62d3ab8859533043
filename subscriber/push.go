package subscriber

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"sync"
	"time"

	"cloud.google.com/go/pubsub/v2"
	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"google.golang.org/api/idtoken"
)

// Push delivery: the service POSTs each message to an HTTPS endpoint of
// the service's own, and the answer's status is the ack. On an ordered
// push subscription the service keeps at most one message of a key
// outstanding, so a key's next message waits until the endpoint has
// answered the previous one with a success: order holds as long as the
// endpoint answers correctly. PushHandler is that endpoint. It runs the
// handler through the same call path as Receive (call.go), and its door
// (pushDoor) turns the path's decision into the status:
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
// again. RetryAfter's delay is not kept: the service's retry policy spaces
// the pushes of a failed message. Attempts are counted per endpoint
// process: a message pushed again to another instance starts its count
// afresh there, so WithMaxAttempts bounds the calls per instance; the
// service's own count, with a dead-letter policy, is
// Delivery.DeliveryAttempt.

// WithPush makes [CreateWithTopic] create a push subscription: the service
// POSTs each message to endpoint, an absolute https URL (the emulator and
// ordering/orderingtest also take http), where [Subscription.PushHandler]
// answers. The subscription has message ordering, as any CreateWithTopic
// makes. An existing push subscription keeps its own endpoint and
// authentication, as it keeps its ordering (S1): [Subscription.PushEndpoint]
// and [Subscription.PushAuth] report them, and a difference from the
// options is logged as a warning. An existing pull subscription cannot
// serve a PushHandler: CreateWithTopic and Open refuse WithPush for one,
// with ErrInvalidConfig.
//
// A failed push comes back after the subscription's retry policy
// ([WithRetryPolicy]), not [WithBackoff], which spaces the retries that
// Receive makes itself; without a retry policy the service backs off from
// 100 ms up to 60 s.
//
// A push endpoint is a public URL: give it [WithPushAuth], so that only the
// subscription's service account can deliver to it. Without it,
// CreateWithTopic and Open refuse a push subscription unless
// [WithUnauthenticatedPush] says that is meant. Serve it from an
// http.Server with the timeouts [Subscription.PushHandler] names. The
// default is a pull subscription. DESIGN.md's "Security model" says what
// a push token proves.
func WithPush(endpoint string) Option {
	return func(c *config) error {
		u, err := url.Parse(endpoint)
		if err != nil || !u.IsAbs() || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
			return invalid("WithPush(%q): need an absolute https URL", endpoint)
		}
		c.push.endpoint = endpoint
		return nil
	}
}

// WithPushAuth makes the push subscription [CreateWithTopic] creates
// authenticate its requests: the service signs each with an OIDC token of
// serviceAccountEmail, for audience ("" for the endpoint's URL, as the
// service does), and [Subscription.PushHandler] refuses any request
// without a valid Google-signed token of that account for that audience.
// The account must exist and the service must be allowed to make its
// tokens (roles/iam.serviceAccountTokenCreator for the Pub/Sub service
// agent). On an existing subscription, the handler checks for the
// subscription's own account and audience; a difference from the option
// is logged as a warning, or refused with [WithStrictPushAuth]. Give each
// subscription an audience of its own (its endpoint's URL, the default,
// is one): a token binds neither the body nor the subscription, so two
// subscriptions of one account and audience take each other's tokens.
func WithPushAuth(serviceAccountEmail, audience string) Option {
	return func(c *config) error {
		if serviceAccountEmail == "" {
			return invalid("WithPushAuth: empty service account email")
		}
		c.push.email, c.push.audience = serviceAccountEmail, audience
		return nil
	}
}

// WithStrictPushAuth makes [CreateWithTopic] and [Open] refuse, with
// ErrInvalidConfig, an existing push subscription whose OIDC account or
// audience differs from [WithPushAuth]'s (an audience of "" stands for the
// endpoint's URL), rather than log the difference and check for the
// subscription's own: a subscription changed behind the program's back
// then stops the program instead of widening whom it trusts. It needs
// WithPushAuth. By default a difference is logged as a warning.
func WithStrictPushAuth() Option {
	return func(c *config) error {
		c.push.strictAuth = true
		return nil
	}
}

// WithUnauthenticatedPush accepts a push subscription whose requests carry
// no token: anyone who learns the endpoint's URL can then deliver messages
// to it. It is for endpoints that something in front of them already
// authenticates, and for tests. The Subscription logs a warning once, when
// it is made. By default such a subscription is refused.
func WithUnauthenticatedPush() Option {
	return func(c *config) error {
		c.push.unauthenticated = true
		return nil
	}
}

// WithTokenValidator sets the validator [Subscription.PushHandler] checks
// tokens with, in place of idtoken.NewValidator's, which fetches Google's
// public keys. Tests use the one ordering/orderingtest's Server makes,
// which trusts the fake's own key: the handler's checks are the same.
// v must not be nil.
func WithTokenValidator(v *idtoken.Validator) Option {
	return func(c *config) error {
		if v == nil {
			return invalid("WithTokenValidator(nil)")
		}
		c.push.validator = v
		return nil
	}
}

// pushOptions are the push settings the options ask for.
type pushOptions struct {
	endpoint        string
	email, audience string // WithPushAuth
	strictAuth      bool   // WithStrictPushAuth
	unauthenticated bool
	validator       *idtoken.Validator
}

// pushSettings are a subscription's own push configuration.
type pushSettings struct {
	endpoint string // "" for a pull subscription
	email    string // the OIDC token's account; "" for none
	audience string // the token's audience: its own, or the endpoint's URL
	wrapped  bool   // the body is the JSON envelope, not the bare data
	metadata bool   // unwrapped, with the metadata as headers
}

func pushSettingsOf(sub *pubsubpb.Subscription) pushSettings {
	pc := sub.GetPushConfig()
	p := pushSettings{endpoint: pc.GetPushEndpoint(), wrapped: pc.GetNoWrapper() == nil}
	p.metadata = pc.GetNoWrapper().GetWriteMetadata()
	if tok := pc.GetOidcToken(); tok != nil {
		p.email, p.audience = tok.GetServiceAccountEmail(), tok.GetAudience()
		if p.audience == "" {
			p.audience = p.endpoint
		}
	}
	return p
}

// apply sets the push configuration on sub, a subscription about to be
// created.
func (o pushOptions) apply(sub *pubsubpb.Subscription) {
	if o.endpoint == "" {
		return
	}
	sub.PushConfig = &pubsubpb.PushConfig{PushEndpoint: o.endpoint}
	if o.email != "" {
		sub.PushConfig.AuthenticationMethod = &pubsubpb.PushConfig_OidcToken_{OidcToken: &pubsubpb.PushConfig_OidcToken{
			ServiceAccountEmail: o.email, Audience: o.audience,
		}}
	}
}

// check refuses a push subscription that PushHandler could not serve
// safely, and warns of one the options did not describe.
func (o pushOptions) check(log *slog.Logger, name string, have pushSettings) error {
	if o.strictAuth && o.email == "" {
		return invalid("WithStrictPushAuth without WithPushAuth: give the account and audience to insist on")
	}
	if have.endpoint == "" {
		if o.endpoint != "" {
			return invalid("WithPush(%q): %s exists as a pull subscription, and keeps its delivery; drop WithPush, or delete the subscription to create it anew", redactURL(o.endpoint), name)
		}
		return nil
	}
	if !have.wrapped && !have.metadata {
		return invalid("push subscription %s sends bare payloads without metadata: keyorder needs the message ID and ordering key (set write_metadata, or use the wrapped envelope)", name)
	}
	if have.email == "" && !o.unauthenticated {
		return invalid("push subscription %s has no push authentication: give it WithPushAuth, or accept that with WithUnauthenticatedPush", name)
	}
	if have.email == "" {
		log.Warn("keyorder/subscriber: the push subscription's requests carry no token: anyone who knows the endpoint can deliver to it",
			"subscription", name, "endpoint", redactURL(have.endpoint))
	}
	if o.endpoint != "" && o.endpoint != have.endpoint {
		log.Warn("keyorder/subscriber: the subscription exists and keeps its own push endpoint, which differs from WithPush",
			"subscription", name, "endpoint", redactURL(have.endpoint), "asked", redactURL(o.endpoint))
	}
	if o.email != "" && (o.email != have.email || o.wantAudience(have) != have.audience) {
		if o.strictAuth {
			return invalid("WithStrictPushAuth: %s pushes with tokens of %q for audience %q, not WithPushAuth's %q for %q; update its push configuration, or the option",
				name, have.email, redactURL(have.audience), o.email, redactURL(o.wantAudience(have)))
		}
		log.Warn("keyorder/subscriber: the subscription exists and keeps its own push authentication, which differs from WithPushAuth",
			"subscription", name, "account", have.email, "audience", redactURL(have.audience))
	}
	return nil
}

// wantAudience is the audience WithPushAuth asks for: its own, or else the
// endpoint's URL, WithPush's or, without it, the subscription's.
func (o pushOptions) wantAudience(have pushSettings) string {
	switch {
	case o.audience != "":
		return o.audience
	case o.endpoint != "":
		return o.endpoint
	}
	return have.endpoint
}

// PushEndpoint returns the URL the service pushes the subscription's
// messages to, as the service reported it when the Subscription was made;
// "" for a pull subscription.
func (s *Subscription) PushEndpoint() string { return s.push.endpoint }

// PushAuth returns the service account whose tokens the subscription's
// push requests carry, and the tokens' audience; "" and "" when they carry
// none.
func (s *Subscription) PushAuth() (serviceAccountEmail, audience string) {
	if s.push.email == "" {
		return "", ""
	}
	return s.push.email, s.push.audience
}

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
	r, err := newReceiver(context.Background(), s, h)
	if err != nil {
		panic(err) // the options were checked when s was made
	}
	d := &pushDoor{r: r, tokens: newTokenChecker(s.cfg.push.validator)}
	if s.parking != nil {
		d.parking = startPushParking(r) // stores s.current once up
	} else {
		s.current.Store(r)
	}
	s.pushing.Store(d)
	return d
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
	d := s.pushing.Load()
	if d == nil {
		return nil
	}
	return d.close(ctx)
}

// A pushDoor is the push endpoint. Each of its requests runs through the
// call path with a door of its own, pushAnswer, and the endpoint answers
// with the decision.
type pushDoor struct {
	r *receiver
	// tokens checks the requests' tokens (push_auth.go).
	tokens *tokenChecker

	// parking keeps the control log, with WithParking (push_park.go); keys
	// runs a key's pushes one at a time.
	parking *pushParking
	keys    keyGate

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
func (d *pushDoor) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	r := d.r
	if req.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		refuse(w, req, http.StatusMethodNotAllowed, "push requests are POSTs")
		return
	}
	select {
	case <-r.stopping:
		refuse(w, req, http.StatusServiceUnavailable, "shutting down")
		return
	default:
	}
	if code, err := d.authorize(req); err != nil {
		r.obs.pushRefused(req.Context(), code, err)
		refuse(w, req, code, http.StatusText(code))
		return
	}
	m, err := decodePush(req, r.s.name, r.s.push)
	if err != nil {
		r.obs.pushRefused(req.Context(), http.StatusBadRequest, err)
		refuse(w, req, http.StatusBadRequest, err.Error())
		return
	}
	out, parkedIt, err := d.run(req, m)
	switch {
	case err != nil:
		http.Error(w, err.Error(), http.StatusServiceUnavailable)
	case out == outAcked || out == outDeduplicated || out == outParked:
		w.WriteHeader(http.StatusNoContent)
	case out == outShutdown:
		http.Error(w, "shutting down", http.StatusServiceUnavailable)
	default:
		http.Error(w, "handler failed", http.StatusInternalServerError)
	}
	if parkedIt != nil {
		// Told once the answer is written (S11).
		d.parking.parked.told(KeyParked, m.OrderingKey, parkedIt, time.Now(), "")
	}
}

// run takes m through the call path on a goroutine of its own, so that a
// handler that exits its goroutine still gets its request answered (S11),
// and through parking's steps with WithParking, and returns the outcome
// the answer reports, with the park this request made, if it made one,
// to be told once the answer is written; or an error, for a 503, when the
// door is closed or parking is not up.
func (d *pushDoor) run(req *http.Request, m *pubsub.Message) (outcome, *parkCause, error) {
	r, ctx := d.r, req.Context()
	if !d.enter() {
		return 0, nil, errShuttingDown
	}
	defer d.calls.Done()
	var p *parking
	if d.parking != nil {
		var err error
		if p, err = d.parking.await(ctx); err != nil {
			return 0, nil, err
		}
		// A move to the parking topic ends with the request, or when Close
		// gives up on the drain.
		var stop context.CancelFunc
		ctx, stop = context.WithCancel(ctx)
		defer stop()
		defer context.AfterFunc(p.ops, stop)()
	}
	if m.OrderingKey != "" {
		done, err := d.keys.enter(ctx, m.OrderingKey)
		if err != nil {
			return 0, nil, err
		}
		defer done()
	}
	r.s.counts.received.Add(1)
	j := newJob(ctx, m)
	j.d.DeliveryAttempt = j.deliveryAttempt()
	j.retriesByNack = true // S5: the service's backoff spaces the retries
	if p != nil && j.d.Key != "" {
		parked, err := p.divertPush(ctx, j)
		if err != nil {
			return 0, nil, err
		}
		if parked {
			return d.parked(j), nil, nil
		}
	}
	v := d.call(ctx, j)
	if v.kind == parkKey {
		parked, cause, err := p.parkPush(ctx, j, v.err)
		if parked {
			return d.parked(j), cause, nil
		}
		r.obs.log.Warn("keyorder/subscriber: could not park a pushed message; the service will push it again",
			"key", j.d.Key, "error", err)
	}
	return d.deliver(j, v), nil, nil
}

// enter counts a request at work, unless the door is closed.
func (d *pushDoor) enter() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return false
	}
	d.calls.Add(1)
	return true
}

// call runs j through the call path on a goroutine of its own, the key's
// lane showing it running meanwhile (lane_push.go), and returns the
// verdict. The handler's context ends with the request, as the service
// stops waiting for the answer then, or with the door's drain.
func (d *pushDoor) call(ctx context.Context, j *job) verdict {
	r := d.r
	life, cancel := context.WithCancel(r.handlerCtx)
	defer cancel()
	defer context.AfterFunc(ctx, cancel)()
	j.life = life
	answer := make(chan verdict, 1)
	go r.call(j, pushAnswer{l: r.lanes.pushing(r, j), answer: answer})
	return <-answer
}

// parked settles j as moved to the parking topic.
func (d *pushDoor) parked(j *job) outcome {
	var fx effects
	d.r.parked(&fx, j)
	d.r.count(j, outParked) // nothing to ack: the answer acks it
	return outParked
}

var errShuttingDown = errors.New("shutting down")

// pushAnswer is the door of one push request: it ends the call in the
// key's lane, where the held-key record notes the verdict, and hands the
// verdict to the request's goroutine, which delivers it as its answer.
// Key events are told last, once the answer can be written, so that a
// callback that exits the goroutine leaves nothing undone.
type pushAnswer struct {
	l      *lane
	answer chan<- verdict
}

func (a pushAnswer) settle(j *job, v verdict) {
	fx := a.l.pushed(j, v)
	a.answer <- v
	a.l.r.apply(a.l, &fx)
}

// deliver turns the verdict on j into the outcome the answer reports, and
// counts it as Receive counts its settlements: a success or a copy acks,
// a failure nacks, for the service to push the message again, or to
// dead-letter it.
func (d *pushDoor) deliver(j *job, v verdict) outcome {
	out := outFailed
	switch v.kind {
	case ran:
		out = outAcked
	case copied:
		out = outDeduplicated
	case stopped:
		out = outShutdown
	case retrying:
		out = outRetried
	}
	d.r.count(j, out)
	return out
}

// close refuses new requests, lets running ones drain, with the releases
// and the moves to the parking topic, until the drain timeout, then
// cancels what runs, and stops the receiver. It returns nil once all that
// has ended, or ctx.Err() when ctx ends first, whatever is still under
// way: that goes on ending behind it, and a later close may wait for it.
func (d *pushDoor) close(ctx context.Context) error {
	d.closeOnce.Do(func() {
		d.finished = make(chan struct{})
		go d.shut(ctx)
	})
	select {
	case <-d.finished:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// shut is close's work, on a goroutine of its own: ctx, the first close's,
// may cut the drain short.
func (d *pushDoor) shut(ctx context.Context) {
	defer close(d.finished)
	r := d.r
	d.mu.Lock()
	d.closed = true
	d.mu.Unlock()
	close(r.stopping)
	drained := make(chan struct{})
	go func() {
		defer close(drained)
		var wg sync.WaitGroup
		wg.Go(d.calls.Wait)
		if d.parking != nil {
			wg.Go(d.parking.drain)
		}
		wg.Wait()
	}()
	t := time.NewTimer(r.cfg.drainTimeout)
	defer t.Stop()
	select {
	case <-drained:
	case <-t.C:
	case <-ctx.Done():
	}
	r.cancelHandlers()
	if d.parking != nil {
		d.parking.cancel()
	}
	<-drained
	if d.parking != nil {
		d.parking.close()
	}
	r.obs.close()
	r.s.current.Store(nil)
}

// authorize checks the request's token when the subscription has push
// authentication, and returns the status to refuse it with.
func (d *pushDoor) authorize(req *http.Request) (int, error) {
	s := d.r.s
	if s.push.email == "" {
		return 0, nil // accepted when made, with WithUnauthenticatedPush
	}
	return d.tokens.check(req, s.push.email, s.push.audience)
}

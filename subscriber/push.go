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
// [WithUnauthenticatedPush] says that is meant. The default is a pull
// subscription.
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
// is logged as a warning.
func WithPushAuth(serviceAccountEmail, audience string) Option {
	return func(c *config) error {
		if serviceAccountEmail == "" {
			return invalid("WithPushAuth: empty service account email")
		}
		c.push.email, c.push.audience = serviceAccountEmail, audience
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
	if have.endpoint == "" {
		if o.endpoint != "" {
			return invalid("WithPush(%q): %s exists as a pull subscription, and keeps its delivery; drop WithPush, or delete the subscription to create it anew", o.endpoint, name)
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
			"subscription", name, "endpoint", have.endpoint)
	}
	if o.endpoint != "" && o.endpoint != have.endpoint {
		log.Warn("keyorder/subscriber: the subscription exists and keeps its own push endpoint, which differs from WithPush",
			"subscription", name, "endpoint", have.endpoint, "asked", o.endpoint)
	}
	if o.email != "" && (o.email != have.email || (o.audience != "" && o.audience != have.audience)) {
		log.Warn("keyorder/subscriber: the subscription exists and keeps its own push authentication, which differs from WithPushAuth",
			"subscription", name, "account", have.email, "audience", have.audience)
	}
	return nil
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
// OIDC token (issuer, signature, expiry, audience) of the subscription's
// service account, with a verified email; otherwise the answer is 401, or
// 403 for another account's token, and h does not run. A body that is not
// a push request of this subscription gets 400, and a method other than
// POST 405.
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
	d := &pushDoor{r: r, validator: s.cfg.push.validator}
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
// this endpoint or another; running handler calls finish until the drain
// timeout ([WithDrainTimeout]) or until ctx ends, whichever comes first,
// then their context is cancelled and Close waits for them; with parking,
// the control log stops. It returns ctx.Err() if ctx ended first. At a
// service's shutdown, call http.Server.Shutdown first, which lets running
// pushes finish and answer, then Close. A Subscription that only receives
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
	// validator checks tokens; made on the first request that needs it,
	// unless WithTokenValidator gave one. Guarded by once.
	validator    *idtoken.Validator
	validatorErr error
	once         sync.Once

	// parking keeps the control log, with WithParking (push_park.go); keys
	// runs a key's pushes one at a time.
	parking *pushParking
	keys    keyGate
	hints   pushHints // push_hint.go

	// calls counts the requests at work; a request joins it under mu
	// unless closed is set, which close sets under mu before it waits.
	// closeOnce closes the receiver once.
	mu        sync.Mutex
	closed    bool
	calls     sync.WaitGroup
	closeOnce sync.Once
	closeErr  error
}

// ServeHTTP answers one push request.
func (d *pushDoor) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	r := d.r
	if req.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		http.Error(w, "push requests are POSTs", http.StatusMethodNotAllowed)
		return
	}
	d.hintToken(req)
	if code, err := d.authorize(req); err != nil {
		r.obs.pushRefused(req.Context(), code, err)
		http.Error(w, http.StatusText(code), code)
		return
	}
	m, err := decodePush(req, r.s.name, r.s.push)
	if err != nil {
		r.obs.pushRefused(req.Context(), http.StatusBadRequest, err)
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	d.hintKey(m)
	out, err := d.run(req, m)
	if err != nil {
		http.Error(w, err.Error(), http.StatusServiceUnavailable)
		return
	}
	switch out {
	case outAcked, outDeduplicated, outParked:
		w.WriteHeader(http.StatusNoContent)
	case outShutdown:
		http.Error(w, "shutting down", http.StatusServiceUnavailable)
	default:
		http.Error(w, "handler failed", http.StatusInternalServerError)
	}
}

// run takes m through the call path on a goroutine of its own, so that a
// handler that exits its goroutine still gets its request answered (S11),
// and through parking's steps with WithParking, and returns the outcome
// the answer reports; or an error, for a 503, when the door is closed or
// parking is not up.
func (d *pushDoor) run(req *http.Request, m *pubsub.Message) (outcome, error) {
	r, ctx := d.r, req.Context()
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return 0, errShuttingDown
	}
	d.calls.Add(1)
	d.mu.Unlock()
	defer d.calls.Done()
	var p *parking
	if d.parking != nil {
		var err error
		if p, err = d.parking.await(ctx); err != nil {
			return 0, err
		}
	}
	if m.OrderingKey != "" {
		done, err := d.keys.enter(ctx, m.OrderingKey)
		if err != nil {
			return 0, err
		}
		defer done()
	}
	r.s.counts.received.Add(1)
	j := newJob(ctx, m)
	j.d.DeliveryAttempt = j.deliveryAttempt()
	if p != nil && j.d.Key != "" {
		parked, err := p.divertPush(ctx, j)
		if err != nil {
			return 0, err
		}
		if parked {
			return d.parked(j), nil
		}
	}
	// The handler's context ends with the request, as the service stops
	// waiting for the answer then, or with the door's drain.
	life, cancel := context.WithCancel(r.handlerCtx)
	defer cancel()
	defer context.AfterFunc(ctx, cancel)()
	j.life = life
	answer := make(chan decision, 1)
	go r.call(j, pushAnswer(answer))
	v := <-answer
	if v.kind == failedForGood && p != nil && j.d.Key != "" {
		r.failedForGood(j)
		if parked, err := p.parkPush(ctx, j, v.err); parked {
			return d.parked(j), nil
		} else if err != nil {
			r.obs.log.Warn("keyorder/subscriber: could not park a pushed message; the service will push it again",
				"key", j.d.Key, "error", err)
		}
	}
	return d.settle(j, v), nil
}

// parked counts j as moved to the parking topic.
func (d *pushDoor) parked(j *job) outcome {
	d.r.s.counts.parked.Add(1)
	d.r.count(j, outParked)
	return outParked
}

var errShuttingDown = errors.New("shutting down")

// pushAnswer is the door of one push request: it hands the decision to the
// request's goroutine, which settles it by its answer.
type pushAnswer chan decision

func (a pushAnswer) settle(_ *job, v decision) { a <- v }

// settle turns the call path's decision on j into the outcome the answer
// reports, and counts it as Receive counts its settlements.
func (d *pushDoor) settle(j *job, v decision) outcome {
	r := d.r
	out := outAcked
	switch v.kind {
	case skipped:
		out = outDeduplicated
	case stopped:
		out = outShutdown
	case retrying:
		out = outRetried
		r.s.counts.retried.Add(1)
	case failedForGood:
		out = outFailed
		r.failedForGood(j)
		if r.deadLettered(j) {
			r.s.counts.deadLettered.Add(1)
		}
	}
	r.count(j, out)
	return out
}

// close refuses new requests, drains the running ones and stops the
// receiver.
func (d *pushDoor) close(ctx context.Context) error {
	d.closeOnce.Do(func() {
		r := d.r
		r.ending.begin(r.cfg.drainTimeout) // bounds the waits for the server (ShutdownBound)
		defer r.ending.end()
		d.mu.Lock()
		d.closed = true
		d.mu.Unlock()
		close(r.stopping)
		drained := make(chan struct{})
		go func() {
			d.calls.Wait()
			close(drained)
		}()
		t := time.NewTimer(r.cfg.drainTimeout)
		defer t.Stop()
		select {
		case <-drained:
		case <-t.C:
		case <-ctx.Done():
			d.closeErr = ctx.Err()
		}
		r.cancelHandlers()
		<-drained
		if d.parking != nil {
			d.parking.close()
		}
		r.obs.close()
		r.s.current.Store(nil)
	})
	return d.closeErr
}

// authorize checks the request's token when the subscription has push
// authentication, and returns the status to refuse it with.
func (d *pushDoor) authorize(req *http.Request) (int, error) {
	s := d.r.s
	if s.push.email == "" {
		return 0, nil // accepted when made, with WithUnauthenticatedPush
	}
	d.once.Do(func() {
		if d.validator == nil {
			d.validator, d.validatorErr = idtoken.NewValidator(context.Background())
		}
	})
	if d.validatorErr != nil {
		return http.StatusInternalServerError, d.validatorErr
	}
	return checkToken(req, d.validator, s.push.email, s.push.audience)
}

var errNoToken = errors.New("no bearer token")

package subscriber

import (
	"context"
	"fmt"
	"github.com/keyorder/keyorder/subscriber/internal/parking"
	"github.com/keyorder/keyorder/subscriber/internal/push"
	"net/http"
)

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
	case s.push.Endpoint == "":
		panic(fmt.Sprintf("subscriber: PushHandler on %s, a pull subscription", s.name))
	case !s.receiving.CompareAndSwap(false, true):
		panic(fmt.Sprintf("subscriber: PushHandler called twice on %s, or while Receive runs", s.name))
	}
	r, err := s.newReceiver(context.Background(), h)
	if err != nil {
		panic(err) // the options were checked when s was made
	}
	cfg := push.Config{
		Name: s.name, Ordered: s.ordered, Settings: s.push, Validator: s.cfg.push.validator,
		Closed: func() {
			s.current.Store(nil)
			s.parkNow.Store(nil)
		},
	}
	if s.parking != nil {
		cfg.Parking = parking.StartPush(s.parkingConfig(), r.ParkingDoor(), func(p *parking.Parking) {
			s.parkNow.Store(p)
			s.current.Store(r) // once up
		})
	} else {
		s.current.Store(r)
	}
	e := push.New(cfg, r.PushDoor())
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
	return e.Close(ctx)
}

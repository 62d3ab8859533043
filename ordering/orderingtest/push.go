package orderingtest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptrace"
	"net/textproto"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// pushConcurrency bounds the push requests a subscription has in flight:
// messages of different keys, and messages without order, go out side by
// side up to it, while a key has at most one. The service adapts its own
// bound to how the endpoint answers (push flow control); the fake keeps
// this one.
const pushConcurrency = 32

// The service's push backoff, for a push subscription without a retry
// policy: a failed message waits from 100 ms, doubling with each failure,
// up to 60 s, before it is pushed again.
const (
	pushMinBackoff = 100 * time.Millisecond
	pushMaxBackoff = 60 * time.Second
)

// pushUserAgent is the User-Agent of the service's push requests.
const pushUserAgent = "APIs-Google; (+https://developers.google.com/webmasters/APIs-Google.html)"

// A pusher delivers a push subscription's messages to its endpoint with
// pushConcurrency workers, each of which takes one message at a time, in
// turn, from the subscription, POSTs it, and settles it by the answer. The
// messages are leased on st, a stand-in stream that holds a key's messages
// one at a time, so a key's next message goes out only once the previous
// one is acked or dead-lettered.
//
// The workers belong to the Server: they count in Server.wg and run until
// ctx ends, which happens when the subscription is deleted or the server
// closes. Ending ctx cancels the requests in flight.
type pusher struct {
	srv    *Server
	sub    *subscription
	st     *stream
	client *http.Client
	ctx    context.Context
	cancel context.CancelFunc
}

// startPusherLocked starts pushing sub's messages to its endpoint.
func (s *Server) startPusherLocked(sub *subscription) *pusher {
	ctx, cancel := context.WithCancel(context.Background())
	p := &pusher{
		srv:    s,
		sub:    sub,
		st:     &stream{sub: sub, unary: true},
		client: s.pushClientLocked(),
		ctx:    ctx,
		cancel: cancel,
	}
	s.wg.Add(pushConcurrency)
	for range pushConcurrency {
		go p.run()
	}
	return p
}

// pushClientLocked returns the client pushes are sent with: WithPushClient's,
// or one of the server's own, made once. Neither follows redirects: the
// service counts a redirect as a failure, as any answer outside its
// acknowledgements.
func (s *Server) pushClientLocked() *http.Client {
	if s.pushClient == nil {
		c := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: pushConcurrency}}
		if s.cfg.pushClient != nil {
			cc := *s.cfg.pushClient
			c = &cc
		}
		c.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
		s.pushClient = c
	}
	return s.pushClient
}

// A push is one message taken for a push request, with what the request
// needs to know of the subscription as it was when it was taken.
type push struct {
	msgs     []*pubsubpb.ReceivedMessage // the message, and a copy DuplicateDeliveries may add
	deadline time.Time                   // the lease's: the request is cancelled then
	name     string                      // the subscription's
	config   *pubsubpb.PushConfig        // replaced, never changed, by an update
	token    string                      // the Authorization bearer token; "" for none
}

// run is one worker.
func (p *pusher) run() {
	defer p.srv.wg.Done()
	for {
		next, wait := p.take()
		if next == nil {
			select {
			case <-wait: // never, when nil
				continue
			case <-p.ctx.Done():
				return
			}
		}
		if tok := next.config.GetOidcToken(); tok != nil {
			// Signed outside the server's lock: the first signature
			// makes the key. Should that fail, the request goes without
			// a token, and the endpoint refuses it.
			next.token, _ = p.srv.signer.pushToken(tok.GetServiceAccountEmail(), pushAudience(next.config))
		}
		for _, rm := range next.msgs {
			p.send(next, rm)
		}
	}
}

// take leases the next message to push, or returns a channel closed when
// there may be one; neither once the pusher is stopped, which is done under
// the server's lock.
func (p *pusher) take() (*push, <-chan struct{}) {
	s, sub := p.srv, p.sub
	s.mu.Lock()
	defer s.mu.Unlock()
	if p.ctx.Err() != nil {
		return nil, nil
	}
	msgs := sub.fill(p.st, 1)
	if len(msgs) == 0 {
		return nil, sub.availChan()
	}
	s.changedLocked()
	return &push{
		msgs:     msgs,
		deadline: sub.leases[msgs[0].GetAckId()].deadline,
		name:     sub.proto.GetName(),
		config:   sub.proto.GetPushConfig(),
	}, nil
}

// pushAudience is the audience of a push config's tokens: the one it names
// or, as the service does, the endpoint's URL.
func pushAudience(pc *pubsubpb.PushConfig) string {
	if aud := pc.GetOidcToken().GetAudience(); aud != "" {
		return aud
	}
	return pc.GetPushEndpoint()
}

// A pushOutcome is how a push request ended.
type pushOutcome int

const (
	pushAcked    pushOutcome = iota // an acknowledging answer
	pushNacked                      // any other answer, or none at all
	pushTimedOut                    // no answer within the ack deadline
	pushStopped                     // the subscription or the server went away
)

// send pushes rm and settles its lease by the outcome.
func (p *pusher) send(next *push, rm *pubsubpb.ReceivedMessage) {
	ctx, cancel := context.WithDeadline(p.ctx, next.deadline)
	defer cancel()
	outcome := p.post(ctx, next, rm)
	if outcome == pushStopped {
		return
	}
	s, sub := p.srv, p.sub
	s.mu.Lock()
	defer s.mu.Unlock()
	// A stale ack ID, of a copy or of a lease that ended meanwhile (the
	// lease ran out, a Seek), settles nothing.
	switch outcome {
	case pushAcked:
		sub.ack(rm.GetAckId())
	case pushNacked:
		sub.modifyAckDeadline(rm.GetAckId(), 0)
	case pushTimedOut:
		if l := sub.leases[rm.GetAckId()]; l != nil {
			sub.expire(l) // unless the server's timer was first
		}
	}
	s.changedLocked()
}

// post sends one push request and tells how it ended. The service counts
// 102, 200, 201, 202 and 204 as acknowledgements, and any other answer as
// a failure ("Receive messages using push").
func (p *pusher) post(ctx context.Context, next *push, rm *pubsubpb.ReceivedMessage) pushOutcome {
	var processing atomic.Bool // a 102 acknowledges, whatever follows
	ctx = httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{
		Got1xxResponse: func(code int, _ textproto.MIMEHeader) error {
			if code == http.StatusProcessing {
				processing.Store(true)
			}
			return nil
		},
	})
	req, err := pushRequest(ctx, next, rm)
	if err != nil {
		return pushNacked
	}
	res, err := p.client.Do(req)
	if err == nil {
		// Read what the endpoint sent, within reason, so that the
		// connection can carry the next request.
		_, _ = io.Copy(io.Discard, io.LimitReader(res.Body, 64<<10))
		res.Body.Close()
	}
	switch {
	case p.ctx.Err() != nil:
		return pushStopped
	case processing.Load():
		return pushAcked
	case err == nil && acknowledges(res.StatusCode):
		return pushAcked
	case err == nil:
		return pushNacked
	case errors.Is(ctx.Err(), context.DeadlineExceeded):
		return pushTimedOut
	}
	return pushNacked // no answer: refused, reset, a TLS failure...
}

// acknowledges reports whether the service counts an answer's final
// status as an acknowledgement.
func acknowledges(code int) bool {
	switch code {
	case http.StatusOK, http.StatusCreated, http.StatusAccepted, http.StatusNoContent:
		return true
	}
	return false
}

// pushRequest builds the request the service sends for rm: by default the
// message wrapped in a JSON envelope; with NoWrapper, its data as the body,
// and with write_metadata its metadata and attributes as headers.
func pushRequest(ctx context.Context, next *push, rm *pubsubpb.ReceivedMessage) (*http.Request, error) {
	m := rm.GetMessage()
	published := jsonTime(m.GetPublishTime())
	var body []byte
	header := http.Header{}
	if nw := next.config.GetNoWrapper(); nw != nil {
		body = m.GetData()
		if nw.GetWriteMetadata() {
			for k, v := range m.GetAttributes() {
				if validHeader(k, v) {
					header.Set(k, v)
				}
			}
			header.Set("x-goog-pubsub-subscription-name", next.name)
			header.Set("x-goog-pubsub-message-id", m.GetMessageId())
			header.Set("x-goog-pubsub-publish-time", published)
			if key := m.GetOrderingKey(); key != "" && validHeader("k", key) {
				header.Set("x-goog-pubsub-ordering-key", key)
			}
			if n := rm.GetDeliveryAttempt(); n > 0 {
				header.Set("x-goog-pubsub-delivery-attempt", strconv.Itoa(int(n)))
			}
		}
	} else {
		var err error
		body, err = json.Marshal(pushEnvelope{
			Message: pushMessage{
				Attributes:   m.GetAttributes(),
				Data:         m.GetData(),
				MessageID:    m.GetMessageId(),
				MessageID2:   m.GetMessageId(),
				PublishTime:  published,
				PublishTime2: published,
				OrderingKey:  m.GetOrderingKey(),
			},
			Subscription:    next.name,
			DeliveryAttempt: rm.GetDeliveryAttempt(),
		})
		if err != nil {
			return nil, err
		}
		header.Set("Content-Type", "application/json")
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, next.config.GetPushEndpoint(), bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	for k, v := range header {
		req.Header[k] = v
	}
	req.Header.Set("User-Agent", pushUserAgent)
	if next.token != "" {
		req.Header.Set("Authorization", "Bearer "+next.token)
	}
	return req, nil
}

// pushEnvelope is the JSON body of a wrapped push request. The message's
// ID and publish time come twice, in camel case and in snake case, as the
// service sends them; deliveryAttempt only on subscriptions with a
// dead-letter policy, where the service counts attempts.
type pushEnvelope struct {
	Message         pushMessage `json:"message"`
	Subscription    string      `json:"subscription"`
	DeliveryAttempt int32       `json:"deliveryAttempt,omitempty"`
}

type pushMessage struct {
	Attributes   map[string]string `json:"attributes,omitempty"`
	Data         []byte            `json:"data,omitempty"` // base64, as protobuf's JSON has bytes
	MessageID    string            `json:"messageId"`
	MessageID2   string            `json:"message_id"`
	PublishTime  string            `json:"publishTime"`
	PublishTime2 string            `json:"publish_time"`
	OrderingKey  string            `json:"orderingKey,omitempty"`
}

// jsonTime formats a timestamp as protobuf's JSON does: RFC 3339 in UTC,
// with 0, 3, 6 or 9 fractional digits.
func jsonTime(ts *timestamppb.Timestamp) string {
	b, err := protojson.Marshal(ts)
	if err != nil {
		panic(err) // the server made ts from a time.Time: it is valid
	}
	return string(bytes.Trim(b, `"`))
}

// validHeader reports whether an attribute can travel as an HTTP header:
// its name a token, its value free of control characters. Others are left
// out of an unwrapped request's headers.
func validHeader(name, value string) bool {
	if name == "" {
		return false
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		ok := c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
		if !ok && !strings.ContainsRune("!#$%&'*+-.^_`|~", rune(c)) {
			return false
		}
	}
	for i := 0; i < len(value); i++ {
		if c := value[i]; c < ' ' && c != '\t' || c == 0x7f {
			return false
		}
	}
	return true
}

// pushBackoff is how long a message of a push subscription waits after its
// failures-th failure before it is pushed again: exponential, from the
// retry policy's minimum backoff to its maximum, or the service's push
// backoff without one. The service documents the bounds, not the curve;
// the fake doubles.
func (sub *subscription) pushBackoff(failures int) time.Duration {
	lo, hi := pushMinBackoff, pushMaxBackoff
	if rp := sub.proto.GetRetryPolicy(); rp != nil {
		lo, hi = rp.GetMinimumBackoff().AsDuration(), rp.GetMaximumBackoff().AsDuration()
	}
	d := lo
	for i := 1; i < failures && d > 0 && d < hi; i++ {
		d *= 2
	}
	return min(d, hi)
}

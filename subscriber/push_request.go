package subscriber

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"cloud.google.com/go/pubsub/v2"
	"google.golang.org/api/idtoken"
)

// What a push request is made of: its token, checked by checkToken, and
// its message, read by decodePush. Both refuse rather than guess.

// googleIssuers are the issuers of Google's ID tokens.
var googleIssuers = map[string]bool{"https://accounts.google.com": true, "accounts.google.com": true}

// checkToken checks the request's bearer token: signed by Google (v checks
// the signature against Google's keys), unexpired, for audience, issued by
// Google, of the account email, with the email verified. It returns 401
// for a missing or bad token and 403 for a good token of someone else.
func checkToken(req *http.Request, v *idtoken.Validator, email, audience string) (int, error) {
	scheme, token, ok := strings.Cut(req.Header.Get("Authorization"), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") || token == "" {
		return http.StatusUnauthorized, errNoToken
	}
	payload, err := v.Validate(req.Context(), token, audience)
	if err != nil {
		return http.StatusUnauthorized, err
	}
	if !googleIssuers[payload.Issuer] {
		return http.StatusUnauthorized, fmt.Errorf("token issued by %q, not Google", payload.Issuer)
	}
	if got, _ := payload.Claims["email"].(string); got != email {
		return http.StatusForbidden, fmt.Errorf("token of %q, not the subscription's account", got)
	}
	if verified, _ := payload.Claims["email_verified"].(bool); !verified {
		return http.StatusForbidden, errors.New("token's email is not verified")
	}
	return 0, nil
}

// maxPushBody bounds the body read: the service's 10 MB message limit, in
// base64 within the envelope, and the envelope's own fields.
const maxPushBody = 14 << 20

// pushEnvelope is the JSON body of a wrapped push request.
type pushEnvelope struct {
	Message struct {
		Attributes   map[string]string `json:"attributes"`
		Data         []byte            `json:"data"`
		MessageID    string            `json:"messageId"`
		MessageIDAlt string            `json:"message_id"`
		PublishTime  time.Time         `json:"publishTime"`
		OrderingKey  string            `json:"orderingKey"`
	} `json:"message"`
	Subscription    string `json:"subscription"`
	DeliveryAttempt int    `json:"deliveryAttempt"`
}

// The metadata headers of an unwrapped push request with write_metadata.
const (
	headerSubscription    = "X-Goog-Pubsub-Subscription-Name"
	headerMessageID       = "X-Goog-Pubsub-Message-Id"
	headerPublishTime     = "X-Goog-Pubsub-Publish-Time"
	headerOrderingKey     = "X-Goog-Pubsub-Ordering-Key"
	headerDeliveryAttempt = "X-Goog-Pubsub-Delivery-Attempt"
)

// decodePush reads the message of a push request for the subscription
// name, configured as p.
func decodePush(req *http.Request, name string, p pushSettings) (*pubsub.Message, error) {
	body, err := io.ReadAll(io.LimitReader(req.Body, maxPushBody+1))
	switch {
	case err != nil:
		return nil, fmt.Errorf("reading the body: %w", err)
	case len(body) > maxPushBody:
		return nil, fmt.Errorf("body over %d bytes", maxPushBody)
	}
	if !p.wrapped {
		return decodeUnwrapped(req.Header, body, name)
	}
	var env pushEnvelope
	if err := json.Unmarshal(body, &env); err != nil {
		return nil, fmt.Errorf("not a push envelope: %w", err)
	}
	msg := env.Message
	id := msg.MessageID
	if id == "" {
		id = msg.MessageIDAlt
	}
	switch {
	case id == "":
		return nil, errors.New("push envelope without a message ID")
	case env.Subscription != name:
		return nil, fmt.Errorf("push for subscription %q, not %s", env.Subscription, name)
	case env.DeliveryAttempt < 0:
		return nil, fmt.Errorf("delivery attempt %d", env.DeliveryAttempt)
	}
	m := &pubsub.Message{ID: id, Data: msg.Data, Attributes: msg.Attributes, PublishTime: msg.PublishTime, OrderingKey: msg.OrderingKey}
	if env.DeliveryAttempt > 0 {
		m.DeliveryAttempt = &env.DeliveryAttempt
	}
	return m, nil
}

// decodeUnwrapped reads an unwrapped push request: the body is the data,
// the metadata come as x-goog-pubsub-* headers, and the attributes as
// headers of their own names, lower-cased, since HTTP header names are not
// case-sensitive. The request's own headers are not attributes.
func decodeUnwrapped(h http.Header, body []byte, name string) (*pubsub.Message, error) {
	id := h.Get(headerMessageID)
	if id == "" {
		return nil, errors.New("unwrapped push without " + headerMessageID)
	}
	if sub := h.Get(headerSubscription); sub != "" && sub != name {
		return nil, fmt.Errorf("push for subscription %q, not %s", sub, name)
	}
	m := &pubsub.Message{ID: id, Data: body, OrderingKey: h.Get(headerOrderingKey), Attributes: map[string]string{}}
	if t := h.Get(headerPublishTime); t != "" {
		pt, err := time.Parse(time.RFC3339Nano, t)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", headerPublishTime, err)
		}
		m.PublishTime = pt
	}
	if a := h.Get(headerDeliveryAttempt); a != "" {
		n, err := strconv.Atoi(a)
		if err != nil || n < 1 {
			return nil, fmt.Errorf("%s %q", headerDeliveryAttempt, a)
		}
		m.DeliveryAttempt = &n
	}
	for k, vs := range h {
		if len(vs) > 0 && !httpOwnHeader(k) {
			m.Attributes[strings.ToLower(k)] = vs[0]
		}
	}
	return m, nil
}

// httpOwnHeader reports whether the header named k (canonical) belongs to
// the request rather than to the message: HTTP's, the proxies' and
// tracing's, and the service's own metadata.
func httpOwnHeader(k string) bool {
	switch k {
	case "Accept", "Accept-Encoding", "Authorization", "Connection", "Content-Length", "Content-Type",
		"Forwarded", "From", "Host", "Te", "Traceparent", "Tracestate", "Transfer-Encoding", "User-Agent", "Via":
		return true
	}
	return strings.HasPrefix(k, "X-Goog-") || strings.HasPrefix(k, "X-Forwarded-") || strings.HasPrefix(k, "X-Cloud-")
}

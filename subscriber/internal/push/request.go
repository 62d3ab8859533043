package push

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"cloud.google.com/go/pubsub/v2"

	"github.com/keyorder/keyorder/ordering"
	"github.com/keyorder/keyorder/publisher"
)

// What a push request's message is made of, read by decodePush after the
// token was checked (auth.go). It refuses, rather than guesses, what
// the service never sends, before anything of the message is kept: an
// ambiguous envelope (a field twice, or in other letter case, which
// encoding/json would take the last of, or fold, where a proxy or an
// audit log in front may read another), a message ID longer than the
// service's, a key that fails ordering.Validate, attributes over P6's
// limits.

// maxPushBody bounds the body read: the service's 10 MB message limit, in
// base64 within the envelope, and the envelope's own fields.
const maxPushBody = 14 << 20

// maxMessageIDBytes is the longest message ID a push may carry. The
// service documents none; its IDs are decimal 64-bit numbers, at most 20
// digits (the emulator's and pstest's are shorter). 64 bytes leaves room
// for a change of format, and is what the ID window keeps as it is
// (internal/window).
const maxMessageIDBytes = 64

// maxServiceAttributes is how many attributes the service may add to the
// publisher's P6 limit of them: its own, named goog* (a schema's name,
// encoding and revision).
const maxServiceAttributes = 8

// pushEnvelope is the message of a push request, as read from a wrapped
// body's JSON or an unwrapped request's headers.
type pushEnvelope struct {
	attrs                 map[string]string
	data                  []byte
	id, idAlt             string // messageId and message_id
	published, publishAlt string // publishTime and publish_time
	key                   string
	subscription          string
	attempt               int
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
// name, configured as p. It reads no more of the body than it must to
// refuse it: an unwrapped request's headers are checked first, and an
// envelope is decoded as it comes, so that its first wrong byte is its
// last read.
func decodePush(req *http.Request, name string, p Settings) (*pubsub.Message, error) {
	body := &io.LimitedReader{R: req.Body, N: maxPushBody + 1}
	var env *pushEnvelope
	var err error
	if p.Wrapped {
		env, err = decodeEnvelope(body)
	} else {
		env, err = unwrappedEnvelope(req.Header, name, body)
	}
	if body.N == 0 {
		return nil, fmt.Errorf("body over %d bytes", maxPushBody)
	}
	if err != nil {
		return nil, err
	}
	if env.subscription != name {
		return nil, fmt.Errorf("push for subscription %.300q, not %s", env.subscription, name)
	}
	return env.message()
}

// message checks env against what the service sends, and returns its
// message.
func (env *pushEnvelope) message() (*pubsub.Message, error) {
	if err := env.check(); err != nil {
		return nil, err
	}
	m := &pubsub.Message{ID: cmpOr(env.id, env.idAlt), Data: env.data, Attributes: env.attrs, OrderingKey: env.key}
	if t := cmpOr(env.published, env.publishAlt); t != "" {
		pt, err := time.Parse(time.RFC3339Nano, t)
		if err != nil {
			return nil, fmt.Errorf("publish time: %w", err)
		}
		m.PublishTime = pt
	}
	if env.attempt > 0 {
		m.DeliveryAttempt = &env.attempt
	}
	return m, nil
}

// check refuses an envelope the service would not send: ambiguous, or
// over its limits.
func (env *pushEnvelope) check() error {
	switch id := cmpOr(env.id, env.idAlt); {
	case id == "":
		return errors.New("push without a message ID")
	case env.id != "" && env.idAlt != "" && env.id != env.idAlt:
		return errors.New("push with two message IDs")
	case env.published != "" && env.publishAlt != "" && env.published != env.publishAlt:
		return errors.New("push with two publish times")
	case env.attempt < 0:
		return fmt.Errorf("delivery attempt %d", env.attempt)
	case len(id) > maxMessageIDBytes || !utf8.ValidString(id):
		return fmt.Errorf("message ID of %d bytes: the service's are at most %d, UTF-8", len(id), maxMessageIDBytes)
	}
	if err := ordering.Validate(env.key); err != nil {
		return fmt.Errorf("ordering key: %w", err)
	}
	return checkAttributes(env.attrs)
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// checkAttributes refuses attributes the service would not have taken from
// a publisher (P6).
func checkAttributes(attrs map[string]string) error {
	own := 0 // the service's, goog*
	for k := range attrs {
		if strings.HasPrefix(k, "goog") {
			own++
		}
	}
	if len(attrs)-own > publisher.MaxAttributes || own > maxServiceAttributes {
		return fmt.Errorf("%d attributes, over the service's %d and %d of its own", len(attrs), publisher.MaxAttributes, maxServiceAttributes)
	}
	for k, v := range attrs {
		switch {
		case k == "" || len(k) > publisher.MaxAttributeKeyBytes:
			return fmt.Errorf("attribute name of %d bytes, limit %d", len(k), publisher.MaxAttributeKeyBytes)
		case len(v) > publisher.MaxAttributeValueBytes:
			return fmt.Errorf("attribute %.64q of %d bytes, limit %d", k, len(v), publisher.MaxAttributeValueBytes)
		case !utf8.ValidString(k) || !utf8.ValidString(v):
			return fmt.Errorf("attribute %.64q is not UTF-8", k)
		}
	}
	return nil
}

// decodeEnvelope reads a wrapped push request's JSON body.
func decodeEnvelope(body io.Reader) (*pushEnvelope, error) {
	var env pushEnvelope
	message := fields{
		"attributes": func(d *json.Decoder) (err error) {
			env.attrs, err = decodeStrings(d, publisher.MaxAttributes+maxServiceAttributes)
			return err
		},
		"data":         decodeInto(&env.data),
		"messageId":    decodeInto(&env.id),
		"message_id":   decodeInto(&env.idAlt),
		"publishTime":  decodeInto(&env.published),
		"publish_time": decodeInto(&env.publishAlt),
		"orderingKey":  decodeInto(&env.key),
	}
	dec := json.NewDecoder(body)
	err := decodeObject(dec, fields{
		"message":         func(d *json.Decoder) error { return decodeObject(d, message) },
		"subscription":    decodeInto(&env.subscription),
		"deliveryAttempt": decodeInto(&env.attempt),
	})
	if err == nil {
		if _, end := dec.Token(); end != io.EOF {
			err = errors.New("data after the envelope")
		}
	}
	if err != nil {
		return nil, fmt.Errorf("not a push envelope: %w", err)
	}
	return &env, nil
}

// fields maps each field of a JSON object to what decodes its value.
type fields map[string]func(*json.Decoder) error

func decodeInto[T any](p *T) func(*json.Decoder) error {
	return func(d *json.Decoder) error { return d.Decode(p) }
}

// decodeObject reads a JSON object from dec, each field of fs with its
// function. A field twice, or one whose name differs from a field of fs in
// letter case alone, is an error: encoding/json would take the last, or
// fold the case. Other fields are skipped, as the service may add some.
func decodeObject(dec *json.Decoder, fs fields) error {
	if err := expectDelim(dec, '{'); err != nil {
		return err
	}
	var seen []string // of fs's fields, so at most len(fs)
	for dec.More() {
		name, err := objectKey(dec)
		if err != nil {
			return err
		}
		f, ok := fs[name]
		switch {
		case ok && slices.Contains(seen, name):
			return fmt.Errorf("field %q twice", name)
		case ok:
			seen = append(seen, name)
			if err := f(dec); err != nil {
				return fmt.Errorf("%s: %w", name, err)
			}
		case foldsToField(fs, name):
			return fmt.Errorf("field %.64q, in other letter case than the service's", name)
		default:
			var skip json.RawMessage
			if err := dec.Decode(&skip); err != nil {
				return err
			}
		}
	}
	return expectDelim(dec, '}')
}

// decodeStrings reads a JSON object of strings, at most limit of them,
// each name once.
func decodeStrings(dec *json.Decoder, limit int) (map[string]string, error) {
	if err := expectDelim(dec, '{'); err != nil {
		return nil, err
	}
	m := map[string]string{}
	for dec.More() {
		name, err := objectKey(dec)
		if err != nil {
			return nil, err
		}
		if _, twice := m[name]; twice {
			return nil, fmt.Errorf("%.64q twice", name)
		}
		if len(m) == limit {
			return nil, fmt.Errorf("over %d", limit)
		}
		var v string
		if err := dec.Decode(&v); err != nil {
			return nil, err
		}
		m[name] = v
	}
	return m, expectDelim(dec, '}')
}

func objectKey(dec *json.Decoder) (string, error) {
	t, err := dec.Token()
	if err != nil {
		return "", err
	}
	name, ok := t.(string)
	if !ok {
		return "", fmt.Errorf("field name %v", t)
	}
	return name, nil
}

func expectDelim(dec *json.Decoder, want json.Delim) error {
	t, err := dec.Token()
	if err != nil {
		return err
	}
	if d, ok := t.(json.Delim); !ok || d != want {
		return fmt.Errorf("%v where %v belongs", t, want)
	}
	return nil
}

func foldsToField(fs fields, name string) bool {
	for f := range fs {
		if strings.EqualFold(f, name) {
			return true
		}
	}
	return false
}

// unwrappedEnvelope reads an unwrapped push request with write_metadata:
// the body is the data, the metadata come as x-goog-pubsub-* headers, and
// the attributes as headers of their own names, lower-cased, since HTTP
// header names are not case-sensitive ("Payload unwrapping"). The service
// sends one value of each; the subscription's name is always among them.
// The request's own headers, and those that a browser, a proxy or a load
// balancer adds (serviceHeader), are not attributes.
func unwrappedEnvelope(h http.Header, name string, body io.Reader) (*pushEnvelope, error) {
	env, err := unwrappedMetadata(h, name)
	if err == nil {
		err = unwrappedAttributes(h, env)
	}
	if err == nil {
		err = env.check() // before the body is read
	}
	if err != nil {
		return nil, err
	}
	if env.data, err = io.ReadAll(body); err != nil {
		return nil, fmt.Errorf("reading the body: %w", err)
	}
	return env, nil
}

// unwrappedMetadata reads the x-goog-pubsub-* headers of an unwrapped push
// for the subscription name.
func unwrappedMetadata(h http.Header, name string) (*pushEnvelope, error) {
	env := &pushEnvelope{attrs: map[string]string{}}
	for _, m := range []struct {
		header string
		into   *string
	}{
		{headerSubscription, &env.subscription}, {headerMessageID, &env.id},
		{headerPublishTime, &env.published}, {headerOrderingKey, &env.key},
	} {
		if vs := h.Values(m.header); len(vs) > 1 {
			return nil, fmt.Errorf("unwrapped push with %d %s", len(vs), m.header)
		}
		*m.into = h.Get(m.header)
	}
	switch env.subscription {
	case "":
		return nil, errors.New("unwrapped push without " + headerSubscription)
	case name:
	default:
		return nil, fmt.Errorf("push for subscription %.300q, not %s", env.subscription, name)
	}
	if a := h.Get(headerDeliveryAttempt); a != "" {
		n, err := strconv.Atoi(a)
		if err != nil || n < 1 || len(h.Values(headerDeliveryAttempt)) > 1 {
			return nil, fmt.Errorf("%s %.16q", headerDeliveryAttempt, a)
		}
		env.attempt = n
	}
	return env, nil
}

// unwrappedAttributes reads an unwrapped push's attributes into env: each
// header that is one, once, and no more of them than the service sends.
func unwrappedAttributes(h http.Header, env *pushEnvelope) error {
	for k, vs := range h {
		switch {
		case notAttribute(k):
			continue
		case len(vs) != 1:
			return fmt.Errorf("attribute header %.64q %d times", k, len(vs))
		case len(env.attrs) == publisher.MaxAttributes+maxServiceAttributes:
			return fmt.Errorf("over %d attribute headers", len(env.attrs))
		}
		env.attrs[strings.ToLower(k)] = vs[0]
	}
	return nil
}

// notAttribute reports whether the header named k (canonical) belongs to
// the request rather than to the message: HTTP's and the service's own
// (Host, Content-Type, Content-Length, User-Agent, From, Authorization,
// the x-goog-* metadata), and those that something between the service
// and the handler adds: proxies, load balancers, tracing, a browser that
// was sent there.
func notAttribute(k string) bool {
	switch k {
	case "Accept", "Accept-Charset", "Accept-Encoding", "Accept-Language", "Authorization", "B3",
		"Cache-Control", "Cdn-Loop", "Connection", "Content-Encoding", "Content-Length", "Content-Type",
		"Cookie", "Dnt", "Early-Data", "Expect", "Forwarded", "From", "Host", "Keep-Alive", "Origin",
		"Pragma", "Priority", "Range", "Referer", "Te", "Traceparent", "Tracestate", "Trailer",
		"Transfer-Encoding", "True-Client-Ip", "Upgrade", "Upgrade-Insecure-Requests", "User-Agent",
		"Via", "X-Client-Ip", "X-Real-Ip", "X-Request-Id", "X-Requested-With":
		return true
	}
	for _, prefix := range []string{"X-Goog-", "X-Forwarded-", "X-Cloud-", "X-Appengine-", "X-Envoy-",
		"X-B3-", "X-Amzn-", "Cf-", "Sec-", "If-", "Proxy-", "Grpc-"} {
		if strings.HasPrefix(k, prefix) {
			return true
		}
	}
	return false
}

package publisher

import (
	"fmt"
	"strings"
	"unicode/utf8"

	"cloud.google.com/go/pubsub/v2"
	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/keyorder/keyorder/ordering"
)

// Limits the service enforces on each message (P6). Publish checks them
// before anything is sent.
const (
	MaxAttributes          = 100
	MaxAttributeKeyBytes   = 256
	MaxAttributeValueBytes = 1024
)

// reservedPrefix starts attribute keys that the service keeps for itself.
const reservedPrefix = "goog"

// A Message is what [Publisher.Publish] sends.
//
// Headers become the message's Pub/Sub attributes, except [ordering.Header],
// which names the ordering key instead (P1, P2). Publish keeps Data and
// Headers until the message's [Result] is ready, and a Result that failed
// keeps them for [Publisher.Retry]: do not modify them before.
type Message struct {
	Data    []byte
	Headers map[string]string
}

// prepare resolves msg's ordering key (P1), adds the trace context tf to
// its attributes, checks it against the service's limits (P6), and writes
// the message a request carries into out. It returns the message's
// encoded size, for flow control, or a *ValidationError for bad input,
// and then leaves out as it was.
func (p *Publisher) prepare(msg *Message, callKey string, out *pubsubpb.PubsubMessage, tf traceFields) (size int32, err error) {
	if msg == nil {
		return 0, &ValidationError{Err: ErrNilMessage}
	}
	key := ordering.Resolve(callKey, msg.Headers, p.defaultKey)
	invalid := func(err error, format string, args ...any) (int32, error) {
		return 0, &ValidationError{Key: truncate(key), Err: err, Detail: fmt.Sprintf(format, args...)}
	}
	if err := ordering.Validate(key); err != nil {
		return 0, &ValidationError{Key: truncate(key), Err: err}
	}

	// The stamp's attributes and bytes count against the limits, at
	// their largest (stamp.go).
	stamp, stampBytes := 0, 0
	if p.stamped(key) {
		stamp, stampBytes = p.stamps.attrs, p.stamps.bound
	}
	traced := len(tf) / 2
	attrs, own := msg.Headers, false
	if _, ok := attrs[ordering.Header]; ok {
		// The key never travels as an attribute (P2). Copy rather than
		// delete: the caller's map is not ours to change.
		attrs, own = make(map[string]string, len(msg.Headers)-1+stamp+traced), true
		for k, v := range msg.Headers {
			if k != ordering.Header {
				attrs[k] = v
			}
		}
	}
	if len(attrs)+stamp+traced > MaxAttributes {
		switch {
		case traced > 0:
			return invalid(ErrTooManyAttributes, "%d, the stamp's %d and the trace context's %d, limit %d", len(attrs), stamp, traced, MaxAttributes)
		case stamp > 0:
			return invalid(ErrTooManyAttributes, "%d and the stamp's %d, limit %d", len(attrs), stamp, MaxAttributes)
		}
		return invalid(ErrTooManyAttributes, "%d, limit %d", len(attrs), MaxAttributes)
	}
	if len(attrs) == 0 {
		if len(msg.Data) == 0 {
			return invalid(ErrEmptyMessage, "")
		}
		attrs = nil
	}
	// bound is an upper bound of the encoded size; the exact size is only
	// computed when the bound comes near the limit.
	bound := fieldBound(len(msg.Data)) + fieldBound(len(key)) + stampBytes
	for k, v := range attrs {
		switch {
		case stamp > 0 && isStampAttribute(k):
			// The stamp is the publisher's to set, and a message with
			// both forms would count as unstamped (S12).
			return 0, &ValidationError{Key: truncate(key), Err: ErrStampAttribute, Detail: fmt.Sprintf("header %q", k)}
		case len(k) > MaxAttributeKeyBytes:
			return invalid(ErrAttributeKeyTooLong, "key %q... is %d bytes, limit %d", truncate(k), len(k), MaxAttributeKeyBytes)
		case len(v) > MaxAttributeValueBytes:
			return invalid(ErrAttributeValueTooLong, "value of %q is %d bytes, limit %d", k, len(v), MaxAttributeValueBytes)
		case strings.HasPrefix(k, reservedPrefix):
			return invalid(ErrReservedAttribute, "key %q", k)
		case !utf8.ValidString(k):
			return invalid(ErrAttributeNotUTF8, "key %q", k)
		case !utf8.ValidString(v):
			return invalid(ErrAttributeNotUTF8, "value of %q", k)
		}
		bound += fieldBound(fieldBound(len(k)) + fieldBound(len(v)))
	}
	if traced > 0 {
		// The trace context's keys start with "goog", which the loop
		// above refuses in the caller's headers: they are added after
		// it, to a map of the message's own (the official client clones
		// the attributes too).
		if !own || attrs == nil {
			attrs, own = cloneWithRoom(attrs, stamp+traced), true
		}
		for i := 0; i < len(tf); i += 2 {
			if len(tf[i+1]) > MaxAttributeValueBytes {
				// A tracestate the service would refuse, with the
				// whole request.
				return invalid(ErrAttributeValueTooLong, "value of %q, the trace context, is %d bytes, limit %d", tf[i], len(tf[i+1]), MaxAttributeValueBytes)
			}
			attrs[tf[i]] = tf[i+1]
			bound += fieldBound(fieldBound(len(tf[i])) + fieldBound(len(tf[i+1])))
		}
	}
	n := bound
	if bound > p.maxBytes {
		n = proto.Size(&pubsubpb.PubsubMessage{Data: msg.Data, Attributes: attrs, OrderingKey: key}) + stampBytes
		if n > p.maxBytes {
			return invalid(ErrMessageTooLarge, "%d bytes encoded, limit %d", n, p.maxBytes)
		}
	}
	if stamp > 0 && (!own || attrs == nil) {
		// A map of the message's own, which enqueue stamps.
		attrs = cloneWithRoom(attrs, stamp)
	}
	out.Data, out.Attributes, out.OrderingKey = msg.Data, attrs, key
	return int32(n), nil
}

// cloneWithRoom returns a copy of m with room for extra more entries.
func cloneWithRoom(m map[string]string, extra int) map[string]string {
	c := make(map[string]string, len(m)+extra)
	for k, v := range m {
		c[k] = v
	}
	return c
}

// fieldBound bounds the encoded size of a length-delimited protobuf field
// whose content is n bytes: a one-byte tag, the length varint, the content.
func fieldBound(n int) int {
	return 1 + protowire.SizeVarint(uint64(n)) + n
}

// maxMessageBytes is the largest encoded message a Publish request to
// topic carries: the 10 MB request limit, less the topic field and the
// framing of the repeated message field.
func maxMessageBytes(topic string) int {
	const framing = 5 // tag and length of the one message, as the official client reserves
	return pubsub.MaxPublishRequestBytes - fieldBound(len(topic)) - framing
}

// truncate shortens s for an error message.
func truncate(s string) string {
	const max = 64
	if len(s) <= max {
		return s
	}
	return s[:max]
}

package publisher

import (
	"errors"
	"fmt"
	"strings"
)

// prefix starts the text of every error of this package, as "keyorder/"
// and the package's name: a reader of a log can tell where it came from.
// The sentinels carry it, so an error that wraps one does not repeat it.
const prefix = "keyorder/publisher: "

// ErrClosed is returned by [Publisher.Publish] once [Publisher.Close] has
// been called. The message was not sent.
var ErrClosed = errors.New(prefix + "publisher is closed")

// ErrInvalidConfig is returned by [New], wrapped with what is wrong, for a
// nil client, a topic ID or name the service would refuse (see [New]), a
// nil [Option], or an Option out of its documented range. An invalid default key also matches the [ordering] sentinel that
// names the broken rule, such as [ordering.ErrKeyTooLong].
var ErrInvalidConfig = errors.New(prefix + "invalid configuration")

// ErrNotRetryable is returned by [Publisher.Retry], wrapped with which
// Result and why, for a Result that has not failed with a [*PublishError],
// was retried already, or is given twice. Retry then sends nothing.
var ErrNotRetryable = errors.New(prefix + "result cannot be retried")

// ErrNilMessage is returned by [Publisher.Publish] for a nil *Message.
var ErrNilMessage = errors.New(prefix + "nil message")

// ErrEmptyMessage is returned by [Publisher.Publish] for a message with
// neither data nor attributes. The service rejects such messages; the
// ordering key does not count, as it is not an attribute (P2).
var ErrEmptyMessage = errors.New(prefix + "message has neither data nor attributes")

// ErrMessageTooLarge is returned by [Publisher.Publish] for a message whose
// encoding, with the framing of a Publish request, exceeds the service's
// 10 MB request limit (pubsub.MaxPublishRequestBytes).
var ErrMessageTooLarge = errors.New(prefix + "message too large")

// ErrTooManyAttributes is returned by [Publisher.Publish] for a message
// with more than [MaxAttributes] attributes. The [ordering.Header] header
// is not counted, as it does not become an attribute.
var ErrTooManyAttributes = errors.New(prefix + "too many attributes")

// ErrAttributeKeyTooLong is returned by [Publisher.Publish] for an
// attribute key longer than [MaxAttributeKeyBytes] bytes.
var ErrAttributeKeyTooLong = errors.New(prefix + "attribute key too long")

// ErrAttributeValueTooLong is returned by [Publisher.Publish] for an
// attribute value longer than [MaxAttributeValueBytes] bytes.
var ErrAttributeValueTooLong = errors.New(prefix + "attribute value too long")

// ErrReservedAttribute is returned by [Publisher.Publish] for an attribute
// key that starts with "goog", a prefix the service reserves.
var ErrReservedAttribute = errors.New(prefix + `attribute key has the reserved "goog" prefix`)

// ErrAttributeNotUTF8 is returned by [Publisher.Publish] for an attribute
// key or value that is not valid UTF-8. Attributes are protobuf strings:
// such a message could not even be encoded, and its failure would stop
// every later message of its key (P4).
var ErrAttributeNotUTF8 = errors.New(prefix + "attribute is not valid UTF-8")

// ErrStampAttribute is returned by [Publisher.Publish] for a message the
// publisher stamps (a keyed message, unless [WithoutStamps]) whose headers
// already name a stamp attribute, [ordering.StampAttribute],
// [ordering.ProducerAttribute] or [ordering.SeqAttribute] of the older
// form, or [ordering.SignatureAttribute]: the stamp and its signature are
// the publisher's to set.
var ErrStampAttribute = errors.New(prefix + "header is a stamp attribute")

// ValidationError reports a message rejected by [Publisher.Publish] before
// anything was sent (P6). Rejection does not pause the message's key: the
// next valid message of the key is published normally.
//
// Err matches, with errors.Is, one of this package's Err* sentinels for
// invalid messages, or [ordering.ErrKeyTooLong] or [ordering.ErrKeyNotUTF8]
// for a bad ordering key.
type ValidationError struct {
	// Key is the ordering key the message resolved to (P1), possibly the
	// invalid key itself, truncated to 64 bytes.
	Key string
	// Err names the broken rule.
	Err error
	// Detail says what in the message broke it, e.g. which attribute.
	Detail string
}

func (e *ValidationError) Error() string {
	var b strings.Builder
	b.WriteString(prefix + "invalid message")
	if e.Key != "" {
		fmt.Fprintf(&b, " (ordering key %q)", e.Key)
	}
	b.WriteString(": ")
	// Err is this package's sentinel, whose prefix is said already, or
	// one of package ordering's.
	b.WriteString(strings.TrimPrefix(e.Err.Error(), prefix))
	if e.Detail != "" {
		b.WriteString(": ")
		b.WriteString(e.Detail)
	}
	return b.String()
}

// Unwrap returns Err, which names the broken rule.
func (e *ValidationError) Unwrap() error { return e.Err }

// PublishError reports a message that the service did not accept.
//
// For a message with an ordering key, a failure fails the key's whole tail
// at once (P4): when the first failed message's Result becomes ready, so
// do the Results of every later message of Key already published, with
// the same Err and Skipped set. No message published before that moment
// can reach the topic after the failed one. Messages of Key published after
// it are sent normally, after the tail, because the key resumes by itself
// (P5). To retry, pass the failed Results to [Publisher.Retry], which
// sends their messages again in order; [Retryable] tells whether the
// cause is worth it.
type PublishError struct {
	// Key is the message's ordering key; empty for an unordered message.
	Key string
	// Err is the cause: the error of the Publish RPC that failed first
	// on Key, usually a gRPC status error.
	Err error
	// Skipped is true for the tail: the message failed because an
	// earlier message of Key failed. Tail messages batched with the
	// failed one were in its rejected request; the others were never
	// sent.
	Skipped bool
}

func (e *PublishError) Error() string {
	switch {
	case e.Key == "":
		return fmt.Sprintf(prefix+"publish failed: %v", e.Err)
	case e.Skipped:
		return fmt.Sprintf(prefix+"failed with an earlier message of ordering key %q: %v", e.Key, e.Err)
	default:
		return fmt.Sprintf(prefix+"publish failed on ordering key %q: %v", e.Key, e.Err)
	}
}

// Unwrap returns the cause, so that errors.Is and status.FromError see the
// RPC error.
func (e *PublishError) Unwrap() error { return e.Err }

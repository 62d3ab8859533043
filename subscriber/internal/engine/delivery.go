package engine

import (
	"context"
	"time"
)

// A Handler processes one delivery (subscriber.Handler). Returning nil
// acks the message (S4); returning an error, or panicking, retries it in
// place and finally nacks it together with its key's local tail (S5).
//
// ctx carries the values of Receive's context but is not cancelled when
// that context ends: a running handler may finish its work during
// shutdown, until the drain timeout cancels ctx (S7).
type Handler func(ctx context.Context, d *Delivery) error

// A Delivery is one message handed to a [Handler] (subscriber.Delivery).
// The handler must not keep it after returning.
type Delivery struct {
	// ID is the message ID the service assigned on publish.
	ID string
	// Key is the message's ordering key, "" for an unordered message.
	Key string
	// Data is the message payload.
	Data []byte
	// Headers are the message's attributes, plus ordering.Header set to
	// Key when the message has one (S2).
	Headers map[string]string
	// PublishTime is when the service accepted the message.
	PublishTime time.Time
	// Attempt counts the handler calls for the message in this Receive,
	// across its deliveries: 1 for the first. Calls that failed with
	// subscriber.RetryAfter count here but not against
	// subscriber.WithMaxAttempts; a release from parking starts the count
	// afresh.
	Attempt int
	// DeliveryAttempt is the service's count of deliveries of the message,
	// set only when the subscription has a dead-letter policy; 0 otherwise.
	DeliveryAttempt int
	// Producer and Seq are the message's stamp (ordering.Stamp): the
	// producer that published it, and its number in that producer's
	// sequence for the key. Both are zero when the message has no valid
	// stamp, or, with subscriber.WithStampKey, none whose signature
	// verifies. Seq increases with each message of the producer for the
	// key, across its epochs (ordering.SplitSeq); keyorder's publisher
	// keeps it below 2^63, so that it fits an int64 column. A valid
	// stamp's attribute (ordering.StampAttribute, or the two of the older
	// form) is taken out of Headers, so that Headers hold what the
	// producer's caller set; a malformed one's are left there, for the
	// handler to see.
	Producer string
	Seq      uint64
}

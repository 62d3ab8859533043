package subscriber

import (
	"context"
	"time"

	"cloud.google.com/go/pubsub/v2"

	"github.com/keyorder/keyorder/ordering"
)

// A Handler processes one delivery. Returning nil acks the message (S4);
// returning an error, or panicking, retries it in place and finally nacks
// it together with its key's local tail (S5).
//
// ctx carries the values of Receive's context but is not cancelled when
// that context ends: a running handler may finish its work during
// shutdown, until the drain timeout cancels ctx (S7).
type Handler func(ctx context.Context, d *Delivery) error

// A Delivery is one message handed to a [Handler]. The handler must not
// keep it after returning.
type Delivery struct {
	// ID is the message ID the service assigned on publish.
	ID string
	// Key is the message's ordering key, "" for an unordered message.
	Key string
	// Data is the message payload.
	Data []byte
	// Headers are the message's attributes, plus [ordering.Header] set to
	// Key when the message has one (S2).
	Headers map[string]string
	// PublishTime is when the service accepted the message.
	PublishTime time.Time
	// Attempt counts the handler calls for the message in this Receive,
	// across its deliveries: 1 for the first. Calls that failed with
	// [RetryAfter] count here but not against [WithMaxAttempts]; a
	// release from parking starts the count afresh.
	Attempt int
	// DeliveryAttempt is the service's count of deliveries of the message,
	// set only when the subscription has a dead-letter policy; 0 otherwise.
	DeliveryAttempt int
	// Producer and Seq are the message's stamp ([ordering.Stamp]): the
	// producer that published it, and its number in that producer's
	// sequence for the key. Both are zero when the message has no valid
	// stamp, or, with [WithStampKey], none whose signature verifies. Seq increases with each message of the producer for the
	// key, across its epochs ([ordering.SplitSeq]); keyorder's publisher
	// keeps it below 2^63, so that it fits an int64 column. A valid
	// stamp's attribute ([ordering.StampAttribute], or the two of the
	// older form) is taken out of Headers, so that Headers hold what the
	// producer's caller set; a malformed one's are left there, for the
	// handler to see.
	Producer string
	Seq      uint64
}

// newDelivery builds the Delivery of m, taking its stamp on trust.
func newDelivery(m *pubsub.Message) Delivery {
	d, _ := deliveryOf(m, nil)
	return d
}

// deliveryOf builds the Delivery of m. It takes over m's attribute map,
// which no one else reads, to add the key header without a copy. With
// keys, a stamp counts only if its signature verifies (stampkey.go).
func deliveryOf(m *pubsub.Message, keys *ordering.StampKeys) (Delivery, stampNote) {
	headers := m.Attributes
	if m.OrderingKey != "" {
		if headers == nil {
			headers = make(map[string]string, 1)
		}
		headers[ordering.Header] = m.OrderingKey
	}
	d := Delivery{
		ID:          m.ID,
		Key:         m.OrderingKey,
		Data:        m.Data,
		Headers:     headers,
		PublishTime: m.PublishTime,
	}
	if m.DeliveryAttempt != nil {
		d.DeliveryAttempt = *m.DeliveryAttempt
	}
	note := takeStamp(&d, headers, keys, m.OrderingKey, m.Data)
	return d, note
}

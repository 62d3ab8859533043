package subscriber

import (
	"cloud.google.com/go/pubsub/v2"

	"github.com/keyorder/keyorder/ordering"
	"github.com/keyorder/keyorder/subscriber/internal/engine"
)

// A Handler processes one delivery. Returning nil acks the message (S4);
// returning an error, or panicking, retries it in place and finally nacks
// it together with its key's local tail (S5).
//
// ctx carries the values of Receive's context but is not cancelled when
// that context ends: a running handler may finish its work during
// shutdown, until the drain timeout cancels ctx (S7).
type Handler = engine.Handler

// A Delivery is one message handed to a [Handler]: its ID, Key, Data,
// Headers (its attributes, plus [ordering.Header] set to Key when it has
// one, S2), PublishTime, Attempt (the handler calls for the message in
// this Receive, across its deliveries: 1 for the first; calls that failed
// with [RetryAfter] count here but not against [WithMaxAttempts]; a
// release from parking starts the count afresh), DeliveryAttempt (the
// service's count, with a dead-letter policy), and Producer and Seq, its
// stamp ([ordering.Stamp]), zero when it has no valid one (or, with
// [WithStampKey], none whose signature verifies). The handler must not
// keep it after returning.
type Delivery = engine.Delivery

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

package orderingtest

import (
	"strconv"
	"strings"
	"time"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"google.golang.org/protobuf/proto"
)

// responseMaxBytes keeps a response well under the 20 MiB the official
// client accepts.
const responseMaxBytes = 10 << 20

// A batch is one response being filled for a stream, within the stream's
// flow control (the service stops sending once max_outstanding_messages or
// max_outstanding_bytes are outstanding on a stream) and a response limit.
type batch struct {
	st    *stream
	limit int // messages
	now   time.Time
	msgs  []*pubsubpb.ReceivedMessage
	bytes int
}

// fits reports whether m may join the batch. A stream with nothing
// outstanding always gets one message, however large, so it cannot stall.
func (b *batch) fits(m *message) bool {
	st := b.st
	switch {
	case len(b.msgs) >= b.limit:
		return false
	case st.maxMsgs > 0 && st.outstanding >= st.maxMsgs:
		return false
	case st.maxBytes > 0 && st.outstanding > 0 && st.bytes+m.size > st.maxBytes:
		return false
	case len(b.msgs) > 0 && b.bytes+m.size > responseMaxBytes:
		return false
	}
	return true
}

// fill takes up to limit messages for st: keys already bound to st, keys
// waiting for any stream, and unordered messages, in turn, so that no kind
// of work starves another. The turn carries over from one fill to the
// next, and moves past a kind only once it has delivered: a key bound to
// the stream that fills the stream's flow-control window each time, as a
// key nacked and sent back at once does, must not keep the keys waiting
// for a stream out for ever.
func (sub *subscription) fill(st *stream, limit int) []*pubsubpb.ReceivedMessage {
	if sub.deleted || st.closed {
		return nil
	}
	b := &batch{st: st, limit: limit, now: time.Now()}
	for len(b.msgs) < b.limit {
		served := false
		for i := 0; i < 3 && !served; i++ {
			kind := (st.turn + i) % 3
			before := len(b.msgs)
			found, room := sub.serve(b, kind)
			if !found {
				continue
			}
			served = true
			if len(b.msgs) > before {
				st.turn = kind + 1
			}
			if !room {
				return b.msgs
			}
		}
		if !served {
			break
		}
	}
	return b.msgs
}

// serve adds to b the work of one kind, if there is any: 0, a key bound to
// b's stream; 1, a key waiting for any stream; 2, an unordered message. It
// reports whether there was such work, and whether b has room left.
func (sub *subscription) serve(b *batch, kind int) (found, room bool) {
	st := b.st
	switch kind {
	case 0:
		if k, ok := st.ready.pop(); ok {
			k.queued = false
			return true, sub.deliverKey(b, k)
		}
	case 1:
		if k, ok := sub.waiting.pop(); ok {
			k.queued = false
			k.stream = st
			return true, sub.deliverKey(b, k)
		}
	default:
		if e, ok := sub.loose.peek(); ok {
			switch {
			case sub.deadLetterDue(e):
				sub.loose.pop()
				sub.forward(e)
				sub.retain(e)
			case b.fits(e.msg):
				sub.loose.pop()
				sub.deliver(b, e)
			default:
				return true, false
			}
			return true, true
		}
	}
	return false, true
}

// deliverKey delivers k's waiting messages, in order, as far as the batch
// allows: several messages of a key may be outstanding at once on a stream,
// as on the service. It reports whether the batch has room left.
func (sub *subscription) deliverKey(b *batch, k *keyState) bool {
	defer sub.forget(k)
	var wait time.Time
	for e := k.takeAgain(); e != nil && wait.IsZero(); e = k.takeAgain() {
		switch {
		case e.notDue(b.now):
			wait = e.due
		case sub.deadLetterDue(e):
			sub.forward(e)
			k.again = k.again[1:]
		case !b.fits(e.msg):
			sub.putBack(b.st, k)
			return false
		default:
			sub.deliver(b, e)
			k.again = k.again[1:]
		}
	}
	for wait.IsZero() && k.next < len(k.queue) {
		e := k.queue[k.next]
		if e.gone {
			k.next++
			continue
		}
		if e.notDue(b.now) {
			wait = e.due // it and the key's later messages wait
			break
		}
		if sub.deadLetterDue(e) {
			sub.forward(e)
			k.next++
			continue
		}
		if !b.fits(e.msg) {
			sub.putBack(b.st, k)
			return false
		}
		sub.deliver(b, e)
		k.next++
	}
	for _, done := range k.trim() {
		sub.retain(done)
	}
	if !wait.IsZero() {
		sub.delayKey(k, wait)
	}
	return true
}

// putBack queues a key the batch had no room for. With messages
// outstanding, the key stays with its stream (on Pull and push, it waits
// for its batch to settle); with none, any stream may take it.
func (sub *subscription) putBack(st *stream, k *keyState) {
	switch {
	case k.outstanding == 0:
		k.stream = nil
		k.queued = true
		sub.waiting.push(k)
	case !st.unary:
		k.queued = true
		st.ready.push(k)
	}
}

// deliver hands e to the batch's stream under a new lease.
func (sub *subscription) deliver(b *batch, e *entry) {
	s, st := sub.srv, b.st
	l := &lease{
		ackID:    sub.newAckID(),
		entry:    e,
		sub:      sub,
		stream:   st,
		deadline: b.now.Add(s.leaseFor(st.leaseLength())),
	}
	s.addLeaseLocked(l)
	sub.leases[l.ackID] = l
	e.lease = l
	st.outstanding++
	st.bytes += e.msg.size
	b.bytes += e.msg.size
	keyOutstanding := 0
	if k := e.key; k != nil {
		keyOutstanding = k.outstanding
		k.outstanding++
	}
	b.msgs = append(b.msgs, sub.received(l.ackID, e))
	sub.record(b.now, l.ackID, e, st, keyOutstanding, false)
	if !sub.exactlyOnce() && s.takeFaultLocked(duplicate, e.msg.proto) != nil {
		// A duplicate, as at-least-once delivery allows. It follows the
		// original at once, so key order still holds; its ack ID leads
		// nowhere, like a stale one, and acks with it are ignored.
		dup := sub.newAckID()
		b.msgs = append(b.msgs, sub.received(dup, e))
		sub.record(b.now, dup, e, st, keyOutstanding+1, true)
	}
}

func (sub *subscription) newAckID() string {
	sub.srv.nextAck++
	return sub.prefix + strconv.FormatInt(sub.srv.nextAck, 10)
}

func (sub *subscription) received(ackID string, e *entry) *pubsubpb.ReceivedMessage {
	rm := &pubsubpb.ReceivedMessage{AckId: ackID, Message: e.msg.proto}
	if sub.deadLetterPolicy() != nil {
		// The service sets delivery_attempt only on subscriptions with a
		// dead-letter policy.
		rm.DeliveryAttempt = int32(e.failures + 1)
	}
	return rm
}

func (sub *subscription) record(at time.Time, ackID string, e *entry, st *stream, keyOutstanding int, dup bool) {
	sub.stats.Delivered++
	if dup {
		sub.stats.Duplicated++
	}
	sub.srv.log = append(sub.srv.log, Delivery{
		Subscription: sub.proto.GetName(),
		MessageID:    e.msg.proto.GetMessageId(),
		OrderingKey:  e.msg.proto.GetOrderingKey(),
		Seq:          e.msg.seq,
		Attempt:      e.failures + 1,
		Stream:       st.id,
		AckID:        ackID,
		Outstanding:  keyOutstanding,
		Duplicate:    dup,
		At:           at,
	})
}

// deadLetterDue reports whether e has used up its delivery attempts.
func (sub *subscription) deadLetterDue(e *entry) bool {
	dlp := sub.deadLetterPolicy()
	return dlp != nil && e.failures >= int(dlp.GetMaxDeliveryAttempts())
}

// forward publishes e to the dead-letter topic and removes it from the
// subscription for good: it counts as acknowledged and is gone, so no tail
// redelivery brings it back. The service does this on a best-effort basis
// and warns that order may not be preserved: the key's later messages go on
// without e, and e reaches the dead-letter topic on its own. If the
// dead-letter topic no longer exists the message is dropped.
func (sub *subscription) forward(e *entry) {
	e.acked, e.gone = true, true
	sub.stats.DeadLettered++
	if t := sub.srv.topics[sub.deadLetterPolicy().GetDeadLetterTopic()]; t != nil {
		sub.srv.publishLocked(t, []*pubsubpb.PubsubMessage{sub.deadLettered(e)})
	}
}

// The attributes the service adds to a message it forwards to a dead-letter
// topic ("Dead-letter topics": "When Pub/Sub forwards an undeliverable
// message, it adds the following attributes to the message").
const (
	dlDeliveryCount       = "CloudPubSubDeadLetterSourceDeliveryCount"       // delivery attempts on the source subscription
	dlSubscription        = "CloudPubSubDeadLetterSourceSubscription"        // the source subscription's ID
	dlSubscriptionProject = "CloudPubSubDeadLetterSourceSubscriptionProject" // the project ID it belongs to
	dlTopicPublishTime    = "CloudPubSubDeadLetterSourceTopicPublishTime"    // when the message was first published
)

// dlPublishTime is the layout of CloudPubSubDeadLetterSourceTopicPublishTime
// in the service's dead-lettered messages: RFC 3339 in UTC, to the
// millisecond, with a numeric offset ("2021-04-08T09:33:30.425+00:00").
const dlPublishTime = "2006-01-02T15:04:05.000+00:00"

// deadLettered is e's message as the dead-letter topic receives it: its
// data, attributes and ordering key, with the service's attributes added.
// The topic gives it a message ID and publish time of its own.
func (sub *subscription) deadLettered(e *entry) *pubsubpb.PubsubMessage {
	p := proto.Clone(e.msg.proto).(*pubsubpb.PubsubMessage)
	if p.Attributes == nil {
		p.Attributes = make(map[string]string, 4)
	}
	project, id := splitSubscriptionName(sub.proto.GetName())
	p.Attributes[dlDeliveryCount] = strconv.Itoa(e.failures)
	p.Attributes[dlSubscription] = id
	p.Attributes[dlSubscriptionProject] = project
	p.Attributes[dlTopicPublishTime] = e.msg.published.UTC().Format(dlPublishTime)
	return p
}

// splitSubscriptionName splits a valid "projects/P/subscriptions/S" into
// P and S.
func splitSubscriptionName(name string) (project, id string) {
	project, id, _ = strings.Cut(strings.TrimPrefix(name, "projects/"), "/subscriptions/")
	return project, id
}

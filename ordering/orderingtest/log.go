package orderingtest

import (
	"bytes"
	"maps"
	"slices"
	"time"
)

// A Delivery records one message the server sent to a subscriber.
type Delivery struct {
	Subscription string
	MessageID    string
	OrderingKey  string
	// Seq is the message's 1-based position among the messages published
	// to its topic with the same ordering key (the empty key included), in
	// publish order: what an order check needs.
	Seq int
	// Attempt is 1 plus the number of times the message was nacked or its
	// lease expired: the service's delivery_attempt. Tail redeliveries and
	// Seek do not count.
	Attempt int
	// Stream identifies the StreamingPull stream, starting at 1; 0 is Pull
	// or push.
	Stream int
	AckID  string
	// Outstanding is how many messages of the same ordering key were
	// outstanding when this one was sent: while it is above 0, the key's
	// deliveries stay on one stream.
	Outstanding int
	// Duplicate marks a copy made by DuplicateDeliveries.
	Duplicate bool
	At        time.Time
}

// A Message is a message as published, with the ID and publish time the
// server gave it.
type Message struct {
	ID          string
	Topic       string
	OrderingKey string
	Seq         int // as in Delivery
	Data        []byte
	Attributes  map[string]string
	PublishTime time.Time
}

// Stats counts what happened on one subscription.
type Stats struct {
	Delivered     int // messages sent, redeliveries and duplicates included
	Duplicated    int // copies sent by DuplicateDeliveries
	Acked         int // acks applied; dropped and stale ones are not counted
	Nacked        int // leases ended by a ModifyAckDeadline of 0, or on push by a failure
	AckFailures   int // ack IDs of acks and modacks an exactly-once subscription failed (see AckFailure)
	Expired       int // leases that ran out; on push, requests not answered within the ack deadline
	DeadLettered  int // messages forwarded to the dead-letter topic
	Outstanding   int // leases held now
	Streams       int // StreamingPull streams open now
	StreamsOpened int // StreamingPull streams opened so far
}

// Messages returns every message published to topic, in publish order,
// dead-lettered copies forwarded to it included. It returns nil once the
// topic is deleted.
func (s *Server) Messages(topic string) []Message {
	s.mu.Lock()
	defer s.mu.Unlock()
	t := s.topics[topic]
	if t == nil {
		return nil
	}
	out := make([]Message, len(t.msgs))
	for i, m := range t.msgs {
		p := m.proto
		out[i] = Message{
			ID:          p.GetMessageId(),
			Topic:       topic,
			OrderingKey: p.GetOrderingKey(),
			Seq:         m.seq,
			Data:        bytes.Clone(p.GetData()),
			Attributes:  maps.Clone(p.GetAttributes()),
			PublishTime: m.published,
		}
	}
	return out
}

// Deliveries returns the deliveries to subscription sub so far, in the
// order the server made them, which is per key the order a stream sent
// them.
func (s *Server) Deliveries(sub string) []Delivery {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []Delivery
	for _, d := range s.log {
		if d.Subscription == sub {
			out = append(out, d)
		}
	}
	return out
}

// Stats returns the counters of subscription sub; the zero Stats if it does
// not exist.
func (s *Server) Stats(sub string) Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	ss := s.subs[sub]
	if ss == nil {
		return Stats{}
	}
	st := ss.stats
	st.Outstanding = len(ss.leases)
	st.Streams = len(ss.streams)
	return st
}

// Subscriptions returns the names of the subscriptions that exist now, in
// every project, sorted. A deleted subscription is not listed.
func (s *Server) Subscriptions() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Sorted(maps.Keys(s.subs))
}

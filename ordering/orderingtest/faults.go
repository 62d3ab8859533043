package orderingtest

import (
	"context"
	"slices"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"google.golang.org/grpc/codes"
)

// A Match selects the messages a fault applies to.
type Match func(*pubsubpb.PubsubMessage) bool

// Key matches messages with the given ordering key.
func Key(key string) Match {
	return func(m *pubsubpb.PubsubMessage) bool { return m.GetOrderingKey() == key }
}

// Data matches messages whose data is exactly data.
func Data(data string) Match {
	return func(m *pubsubpb.PubsubMessage) bool { return string(m.GetData()) == data }
}

// AnyMessage matches every message.
func AnyMessage(*pubsubpb.PubsubMessage) bool { return true }

type faultKind int

const (
	failPublish faultKind = iota
	holdPublish
	loseResponse
	dropAck
	failAck
	duplicate
)

// A Fault is an injected misbehaviour of the server, active from the call
// that made it until it has fired as many times as it was given, or until
// Remove. Its methods are safe for concurrent use.
type Fault struct {
	srv     *Server
	kind    faultKind
	match   Match
	code    codes.Code    // failPublish, loseResponse
	failure AckFailure    // failAck
	left    int           // firings left; < 0: until Remove
	release chan struct{} // holdPublish: closed by Remove
	hits    int           // guarded by srv.mu
}

// Hits returns how many times the fault has fired.
func (f *Fault) Hits() int {
	f.srv.mu.Lock()
	defer f.srv.mu.Unlock()
	return f.hits
}

// Wait blocks until the fault has fired at least n times, or returns
// ctx.Err() when ctx ends first.
func (f *Fault) Wait(ctx context.Context, n int) error {
	return f.srv.WaitFor(ctx, func() bool { return f.Hits() >= n })
}

// Remove deactivates the fault. For HoldPublish it also releases every
// held request. Removing a fault twice is harmless.
func (f *Fault) Remove() {
	s := f.srv
	s.mu.Lock()
	defer s.mu.Unlock()
	s.removeFaultLocked(f)
}

func (s *Server) removeFaultLocked(f *Fault) {
	i := slices.Index(s.faults, f)
	if i < 0 {
		return
	}
	s.faults = slices.Delete(s.faults, i, i+1)
	if f.release != nil {
		close(f.release)
	}
}

func (s *Server) addFault(f *Fault) *Fault {
	f.srv = s
	if f.left == 0 {
		f.left = -1
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.faults = append(s.faults, f)
	return f
}

// takeFaultLocked fires the oldest active fault of kind that matches any of
// msgs, and returns it, or nil.
func (s *Server) takeFaultLocked(kind faultKind, msgs ...*pubsubpb.PubsubMessage) *Fault {
	for _, f := range s.faults {
		if f.kind != kind || !slices.ContainsFunc(msgs, f.match) {
			continue
		}
		f.hits++
		if f.left > 0 {
			f.left--
			if f.left == 0 && kind != holdPublish {
				s.removeFaultLocked(f)
			}
		}
		s.changedLocked()
		return f
	}
	return nil
}

// FailPublish makes the next times Publish requests that carry a message
// matching match fail with code, storing nothing, as a failed request does
// on the service. times <= 0 means every such request until Remove.
func (s *Server) FailPublish(match Match, code codes.Code, times int) *Fault {
	return s.addFault(&Fault{kind: failPublish, match: match, code: code, left: times})
}

// LosePublishResponses makes the next times Publish requests that carry a
// message matching match store their messages and then fail with code, as
// when the service stored a request whose response never reached the
// client: a deadline ran out or a connection broke on the way back. A
// client that retries the request (the official one retries Unavailable,
// DeadlineExceeded and other transient codes) stores the messages again,
// under new message IDs: the duplicates Pub/Sub documents for publish
// retries, which even exactly-once delivery does not remove. With a code
// the client does not retry, the caller sees a failure for messages that
// were stored. times <= 0 means every such request until Remove.
func (s *Server) LosePublishResponses(match Match, code codes.Code, times int) *Fault {
	return s.addFault(&Fault{kind: loseResponse, match: match, code: code, left: times})
}

// HoldPublish holds every Publish request that carries a matching message
// until the returned fault is removed: then held requests complete
// normally. A held request fails if its context ends or the server closes
// first. Hits counts the requests held so far.
func (s *Server) HoldPublish(match Match) *Fault {
	return s.addFault(&Fault{kind: holdPublish, match: match, release: make(chan struct{})})
}

// DropAcks makes the next times acks of matching messages be accepted but
// not applied, as when the service's best-effort acknowledgment did not
// persist: the lease runs out and the message, with its key's tail on an
// ordered subscription, is delivered again. times <= 0 means until Remove.
// Use WithAckDeadline to make the redelivery come quickly. It does not
// apply to subscriptions with exactly-once delivery, whose successful acks
// are final; FailAcks makes their acks fail.
func (s *Server) DropAcks(match Match, times int) *Fault {
	return s.addFault(&Fault{kind: dropAck, match: match, left: times})
}

// DuplicateDeliveries makes the next times deliveries of matching messages
// come twice in a row, the second time with an ack ID that acks nothing, as
// at-least-once delivery allows. times <= 0 means until Remove. It does not
// apply to subscriptions with exactly-once delivery, which never resend a
// message while its lease holds.
func (s *Server) DuplicateDeliveries(match Match, times int) *Fault {
	return s.addFault(&Fault{kind: duplicate, match: match, left: times})
}

// RedeliverKey makes the service's tail redelivery happen now for key on the
// ordered subscription sub: every message of the key delivered since its
// oldest unacknowledged one, acknowledged messages included, is delivered
// again in order, as after a server restart or a lost acknowledgment.
// Messages forwarded to a dead-letter topic are not: the service removed
// them from the subscription. It returns how many messages will be
// delivered again: 0 if none of the key's messages are held.
func (s *Server) RedeliverKey(sub, key string) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ss := s.subs[sub]
	switch {
	case ss == nil:
		return 0, ErrNoSubscription
	case !ss.ordered:
		return 0, ErrUnordered
	}
	k := ss.keys[key]
	if k == nil || k.next == 0 {
		return 0, nil
	}
	n := k.delivered()
	ss.rewind(k, 0)
	ss.route(k)
	s.changedLocked()
	return n, nil
}

// BreakStreams ends every open StreamingPull stream of sub with Unavailable,
// which the official client retries by opening a new stream. Keys move to
// the new streams once their outstanding messages settle: the service keeps
// affinity only while a key has messages outstanding. It returns how many
// streams it broke.
func (s *Server) BreakStreams(sub string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	ss := s.subs[sub]
	if ss == nil {
		return 0
	}
	n := 0
	for st := range ss.streams {
		if st.killErr == nil {
			st.end(errBroken)
			n++
		}
	}
	return n
}

package orderingtest

import (
	"errors"
	"io"
	"time"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// A stream is one open StreamingPull call or, with unary set, a stand-in:
// for every Pull call of a subscription, or for every push request of a
// push subscription. A stand-in has no channels, and holds a key's
// messages one batch at a time. Fields other than the channels are guarded
// by Server.mu.
type stream struct {
	id    int // 0 for a stand-in
	sub   *subscription
	unary bool

	wakeC   chan struct{}   // capacity 1: work may be available; nil for Pull
	kill    chan struct{}   // closed by end; nil for Pull
	killErr error           // what the stream ends with, set before kill closes
	closed  bool            // unregistered from its subscription
	ready   fifo[*keyState] // keys bound to this stream with messages to send
	turn    int             // which kind of work fill serves first next time
	pingDue bool            // a client ping awaits its heartbeat response

	ackDeadline time.Duration // StreamAckDeadlineSeconds
	maxMsgs     int           // MaxOutstandingMessages; <= 0: no limit
	maxBytes    int           // MaxOutstandingBytes; <= 0: no limit
	outstanding int           // leases held by deliveries on this stream
	bytes       int           // their size
}

// errBroken ends streams broken by BreakStreams. The official client retries
// Unavailable by opening a new stream.
var errBroken = status.Error(codes.Unavailable, "orderingtest: stream broken by fault injection")

// wake tells the stream's sender to look for work. It never blocks.
func (st *stream) wake() {
	select {
	case st.wakeC <- struct{}{}:
	default:
	}
}

// end makes the stream's call return err. The first call wins.
func (st *stream) end(err error) {
	if st.kill != nil && st.killErr == nil {
		st.killErr = err
		close(st.kill)
	}
}

// leaseLength is the deadline a delivery on this stream asks for: the
// stream's ack deadline, or the subscription's for Pull and push.
func (st *stream) leaseLength() time.Duration {
	if st.unary {
		return time.Duration(st.sub.proto.GetAckDeadlineSeconds()) * time.Second
	}
	return st.ackDeadline
}

// StreamingPull serves one stream. The handler goroutine sends; a reader
// goroutine, owned by the Server, applies what the client sends. The reader
// ends when the stream does, which is no later than this handler's return.
func (svc subscriberService) StreamingPull(gs pubsubpb.Subscriber_StreamingPullServer) error {
	s := svc.s
	req, err := gs.Recv()
	if err != nil {
		return err
	}
	s.mu.Lock()
	sub, err := s.subscriptionLocked(req.GetSubscription())
	if err == nil && len(req.GetModifyDeadlineAckIds()) > 0 {
		err = invalid("the first StreamingPull request may not modify deadlines")
	}
	if err != nil {
		s.mu.Unlock()
		return err
	}
	st := sub.openStream(req)
	s.changedLocked()
	s.mu.Unlock()

	reads := make(chan error, 1)
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		reads <- s.readStream(gs, st)
	}()
	err = s.sendStream(gs, st, reads)

	s.mu.Lock()
	st.sub.closeStream(st)
	s.changedLocked()
	s.mu.Unlock()
	return err
}

// readStream applies the client's requests until the stream ends.
func (s *Server) readStream(gs pubsubpb.Subscriber_StreamingPullServer, st *stream) error {
	for {
		req, err := gs.Recv()
		if err != nil {
			return err
		}
		s.mu.Lock()
		err = st.apply(req)
		s.changedLocked()
		s.mu.Unlock()
		if err != nil {
			return err
		}
	}
}

// apply handles a request after the first: acks, deadline changes, and
// pings, which the service answers with a heartbeat response.
func (st *stream) apply(req *pubsubpb.StreamingPullRequest) error {
	ids, secs := req.GetModifyDeadlineAckIds(), req.GetModifyDeadlineSeconds()
	if len(ids) != len(secs) {
		return invalid("%d modify_deadline_ack_ids but %d modify_deadline_seconds", len(ids), len(secs))
	}
	for _, v := range secs {
		if v < 0 || v > maxAckDeadlineSecs {
			return invalid("ack deadline %d s outside [0, %d]", v, maxAckDeadlineSecs)
		}
	}
	if st.sub.deleted {
		return nil
	}
	for _, id := range req.GetAckIds() {
		st.sub.ack(id)
	}
	for i, id := range ids {
		st.sub.modifyAckDeadline(id, time.Duration(secs[i])*time.Second)
	}
	if d := req.GetStreamAckDeadlineSeconds(); d > 0 {
		st.ackDeadline = streamAckDeadline(d)
	}
	if len(req.GetAckIds()) == 0 && len(ids) == 0 {
		st.pingDue = true
		st.wake()
	}
	return nil
}

// sendStream sends batches whenever the stream is woken, until the stream
// ends one way or another.
func (s *Server) sendStream(gs pubsubpb.Subscriber_StreamingPullServer, st *stream, reads <-chan error) error {
	for {
		select {
		case <-st.wakeC:
		case err := <-reads:
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		case <-st.kill:
			return st.killErr // written before kill was closed
		case <-s.done:
			return status.Error(codes.Unavailable, "orderingtest: server closed")
		case <-gs.Context().Done():
			return status.FromContextError(gs.Context().Err()).Err()
		}
		for {
			s.mu.Lock()
			if err := gs.Context().Err(); err != nil {
				// The client has cancelled the call: the service sends
				// nothing more on it. Checked under the lock that fill
				// takes, so that a request the client sent after
				// cancelling (a nack at shutdown) finds the stream gone.
				s.mu.Unlock()
				return status.FromContextError(err).Err()
			}
			msgs := st.sub.fill(st, s.cfg.responseSize)
			ping := st.pingDue
			st.pingDue = false
			res := &pubsubpb.StreamingPullResponse{
				ReceivedMessages: msgs,
				// Sent on every response, heartbeats included: the official
				// client resets its ordering setting from each one.
				SubscriptionProperties: &pubsubpb.StreamingPullResponse_SubscriptionProperties{
					MessageOrderingEnabled:     st.sub.ordered,
					ExactlyOnceDeliveryEnabled: st.sub.proto.GetEnableExactlyOnceDelivery(),
				},
			}
			if len(msgs) > 0 {
				s.changedLocked()
			}
			s.mu.Unlock()
			if len(msgs) == 0 && !ping {
				break
			}
			if err := gs.Send(res); err != nil {
				return err
			}
			if len(msgs) == 0 {
				break
			}
		}
	}
}

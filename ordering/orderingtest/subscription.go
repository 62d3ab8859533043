package orderingtest

import (
	"strconv"
	"time"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// A subscription is the server side of one subscription: its backlog, its
// leases and its streams. Every field and every method is guarded by
// Server.mu; methods expect the caller to hold it.
type subscription struct {
	srv     *Server
	proto   *pubsubpb.Subscription
	topic   *topic // nil once the topic is deleted
	prefix  string // of this subscription's ack IDs
	ordered bool
	deleted bool
	filter  *filter // nil for none; messages that fail it never enter (filter.go)

	keys    map[string]*keyState // ordered subscriptions: keys holding messages
	loose   fifo[*entry]         // messages waiting for delivery without order
	waiting fifo[*keyState]      // keys with work and no stream yet
	streams map[*stream]struct{} // open StreamingPull streams
	pull    *stream              // stands for every Pull call
	leases  map[string]*lease    // by ack ID
	acked   []*message           // acknowledged and retained for Seek (retain_acked_messages)
	avail   chan struct{}        // closed when work may be available; Pull waits on it
	epoch   int                  // counts resets; delayed actions from an earlier epoch are void
	pusher  *pusher              // nil unless the subscription pushes (push.go)
	stats   Stats
}

func newSubscription(s *Server, p *pubsubpb.Subscription, t *topic, id int64) *subscription {
	sub := &subscription{
		srv:     s,
		proto:   p,
		topic:   t,
		prefix:  strconv.FormatInt(id, 10) + "-",
		ordered: p.GetEnableMessageOrdering(),
		filter:  mustParseFilter(p.GetFilter()),
		keys:    map[string]*keyState{},
		streams: map[*stream]struct{}{},
		leases:  map[string]*lease{},
	}
	sub.pull = &stream{sub: sub, unary: true}
	return sub
}

// deadLetterPolicy returns where messages go after too many delivery
// attempts, and after how many; nil if nowhere.
func (sub *subscription) deadLetterPolicy() *pubsubpb.DeadLetterPolicy {
	return sub.proto.GetDeadLetterPolicy()
}

// enqueue adds a newly published (or sought-back) message to the backlog,
// deliverable at due: the messages of one publish request become
// deliverable together, as they were stored together.
func (sub *subscription) enqueue(m *message, due time.Time) {
	if !sub.filter.matches(m.proto) {
		return // the service acknowledges it for the subscription
	}
	e := &entry{msg: m, due: due}
	key := m.proto.GetOrderingKey()
	if !sub.ordered || key == "" {
		// Messages without a key, and every message of an unordered
		// subscription, carry no ordering promise.
		sub.line(e)
		return
	}
	k := sub.keys[key]
	if k == nil {
		k = &keyState{name: key}
		sub.keys[key] = k
	}
	k.add(e)
	sub.route(k)
}

// route puts a key with messages to deliver where a stream will find it.
func (sub *subscription) route(k *keyState) {
	if !k.pending() || k.queued || k.delayed {
		return
	}
	if e := k.head(); e != nil && e.notDue(time.Now()) {
		sub.delayKey(k, e.due)
		return
	}
	if k.outstanding == 0 {
		// Nothing outstanding: the service may move the key to any client.
		k.stream = nil
	}
	switch st := k.stream; {
	case st == nil:
		k.queued = true
		sub.waiting.push(k)
		sub.wakeAll()
	case st.closed || st.unary:
		// The key waits until its outstanding messages settle. A closed
		// stream's client may still ack them, Pull allows only one batch
		// per key at a time ("Only one batch of messages can be
		// outstanding for an ordering key at a time"), and push one
		// message: the service keeps one message outstanding per
		// ordering key on a push subscription.
	default:
		k.queued = true
		st.ready.push(k)
		st.wake()
	}
}

// wakeAll tells every stream and Pull call that work may be available.
func (sub *subscription) wakeAll() {
	for st := range sub.streams {
		st.wake()
	}
	if sub.avail != nil {
		close(sub.avail)
		sub.avail = nil
	}
}

// availChan returns a channel closed when work may become available.
func (sub *subscription) availChan() <-chan struct{} {
	if sub.avail == nil {
		sub.avail = make(chan struct{})
	}
	return sub.avail
}

// settle ends a lease without deciding the message's fate.
func (sub *subscription) settle(l *lease) {
	sub.srv.removeLeaseLocked(l)
	delete(sub.leases, l.ackID)
	l.entry.lease = nil
	st := l.stream
	st.outstanding--
	st.bytes -= l.entry.msg.size
	st.wake() // flow control may have room again
	if k := l.entry.key; k != nil {
		k.outstanding--
	}
}

// ack applies an acknowledgment and reports why it failed, or "". Stale
// ack IDs, from deliveries that were since redelivered, expired or acked,
// fail with PermanentAckFailure; only exactly-once subscriptions report it
// (see exactlyonce.go), others ignore them, as the service may.
func (sub *subscription) ack(ackID string) AckFailure {
	l := sub.leases[ackID]
	if l == nil {
		return PermanentAckFailure
	}
	if stopped, why := sub.ackFault(l.entry.msg.proto); stopped {
		// Failed, or accepted without persisting: either way the lease
		// runs on and the message comes back when it expires ("the
		// best-effort acknowledgment did not persist").
		return why
	}
	sub.settle(l)
	sub.stats.Acked++
	e := l.entry
	e.acked = true
	// On an exactly-once subscription "an acknowledged message will not
	// be resent": not even with its key's tail.
	e.gone = sub.exactlyOnce()
	k := e.key
	if k == nil {
		sub.retain(e)
		return ""
	}
	for _, done := range k.trim() {
		sub.retain(done)
	}
	if k.outstanding == 0 {
		sub.route(k)
	}
	sub.forget(k)
	return ""
}

// retain keeps an acknowledged message for Seek if the subscription asks.
func (sub *subscription) retain(e *entry) {
	if sub.proto.GetRetainAckedMessages() {
		sub.acked = append(sub.acked, e.msg)
	}
}

// forget drops an idle key's state.
func (sub *subscription) forget(k *keyState) {
	if k.idle() && sub.keys[k.name] == k {
		delete(sub.keys, k.name)
	}
}

// modifyAckDeadline extends a lease, or nacks it when d is 0. Like ack, it
// reports a stale ack ID as PermanentAckFailure.
func (sub *subscription) modifyAckDeadline(ackID string, d time.Duration) AckFailure {
	l := sub.leases[ackID]
	if l == nil {
		return PermanentAckFailure
	}
	if d == 0 {
		sub.stats.Nacked++
		sub.fail(l)
		return ""
	}
	sub.srv.extendLeaseLocked(l, sub.srv.leaseFor(d))
	return ""
}

// expire handles a lease whose deadline passed.
func (sub *subscription) expire(l *lease) {
	sub.stats.Expired++
	sub.fail(l)
}

// fail returns a nacked or expired message to the backlog.
func (sub *subscription) fail(l *lease) {
	sub.settle(l)
	e := l.entry
	e.failures++ // delivery attempts = 1 + nacks + expired deadlines
	var backoff time.Duration
	if sub.pusher != nil {
		// On push the service backs off; on pull the fake redelivers at
		// once (retry policies are not modelled there).
		backoff = sub.pushBackoff(e.failures)
	}
	if e.key == nil {
		e.due = sub.srv.dueAfter(backoff)
		sub.line(e)
		return
	}
	if sub.srv.cfg.emulatorRedelivery {
		e.due = sub.srv.dueAfter(backoff)
		e.key.againLater(e)
		sub.route(e.key)
		return
	}
	sub.rewind(e.key, e.key.index(e))
	if backoff > 0 {
		e.due = sub.srv.dueAfter(backoff)
	}
	sub.route(e.key)
}

// rewind makes queue[i:] of k deliverable again, in order: the service
// redelivers every later message of the key along with a redelivered one,
// acknowledged or not. Their outstanding leases are revoked, so acks with
// the old ack IDs are ignored and the new deliveries need acks of their own.
// Messages that are gone stay acknowledged, and deliverKey skips them.
func (sub *subscription) rewind(k *keyState, i int) {
	due := sub.srv.dueAfter(0)
	for _, e := range k.queue[i:k.next] {
		if e.lease != nil {
			sub.settle(e.lease)
		}
		if !e.gone {
			e.acked = false
		}
		e.due = due
	}
	k.next = i
}

// openStream registers a StreamingPull stream.
func (sub *subscription) openStream(req *pubsubpb.StreamingPullRequest) *stream {
	sub.srv.nextStream++
	st := &stream{
		id:          int(sub.srv.nextStream),
		sub:         sub,
		wakeC:       make(chan struct{}, 1),
		kill:        make(chan struct{}),
		ackDeadline: streamAckDeadline(req.GetStreamAckDeadlineSeconds()),
		maxMsgs:     int(req.GetMaxOutstandingMessages()),
		maxBytes:    int(req.GetMaxOutstandingBytes()),
	}
	sub.streams[st] = struct{}{}
	sub.stats.StreamsOpened++
	st.wake()
	return st
}

// closeStream unregisters a stream. Its keys move on to other streams once
// their outstanding messages settle.
func (sub *subscription) closeStream(st *stream) {
	if st.closed {
		return
	}
	st.closed = true
	delete(sub.streams, st)
	ready := st.ready.all()
	st.ready.clear()
	for _, k := range ready {
		k.queued = false
		sub.route(k)
	}
	sub.wakeAll()
}

// remove tears the subscription down when it is deleted.
func (sub *subscription) remove() {
	sub.deleted = true
	sub.stopPush()
	for st := range sub.streams {
		st.end(status.Errorf(codes.NotFound, "orderingtest: subscription %s deleted", sub.proto.GetName()))
	}
	sub.reset()
	sub.wakeAll()
	if sub.topic != nil {
		delete(sub.topic.subs, sub)
	}
}

// reset drops the backlog and every lease, for Seek and deletion.
func (sub *subscription) reset() {
	sub.epoch++
	for _, l := range sub.leases {
		sub.settle(l)
	}
	sub.keys = map[string]*keyState{}
	sub.loose.clear()
	sub.waiting.clear()
	for st := range sub.streams {
		st.ready.clear()
	}
	sub.acked = nil
}

// stopPush ends the subscription's push workers, if it has any, and
// cancels their requests in flight. Server.Close waits for them.
func (sub *subscription) stopPush() {
	if sub.pusher != nil {
		sub.pusher.cancel()
	}
}

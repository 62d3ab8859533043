package orderingtest

import "time"

// An entry is one message's state in one subscription. Guarded by
// Server.mu, like everything it points to.
type entry struct {
	msg   *message
	key   *keyState // nil when the message is delivered unordered
	pos   int       // position in the key's sequence, for indexing key.queue
	acked bool
	// gone marks a message the subscription holds no more although it is
	// still in its key's queue, behind an earlier unacknowledged message:
	// one forwarded to the dead-letter topic, which the service removes
	// from the subscription, or one acknowledged on an exactly-once
	// subscription, which the service never resends. A tail redelivery
	// skips it and leaves it acknowledged, so it is neither delivered nor
	// forwarded again.
	gone     bool
	failures int    // nacks and expired leases: the delivery attempt is failures+1
	lease    *lease // non-nil while a delivery is outstanding
	// due is when the message may next be delivered; zero means at once.
	// It is set each time the message becomes deliverable: published,
	// nacked, expired, or sent back with its key's tail (delay.go).
	due time.Time
}

// keyState is one ordering key of an ordered subscription.
//
// queue holds the key's messages from the oldest unacknowledged one on.
// Acknowledged messages behind it stay, because the service redelivers a
// key's whole tail, acknowledged messages included, when an earlier message
// is redelivered ("Redeliveries of a message trigger redelivery of all
// subsequent messages for that key, even acknowledged ones"). queue[:next]
// have been delivered in the current pass; queue[next:] wait for delivery.
//
// While any message is outstanding the key belongs to one stream: the
// service keeps a key on the streamingPull client that holds its
// outstanding messages, and may move it once none are.
type keyState struct {
	name        string
	queue       []*entry
	base        int // pos of queue[0]
	next        int
	outstanding int     // leases held on queue entries
	stream      *stream // affinity; meaningful while outstanding > 0
	queued      bool    // in stream.ready or subscription.waiting
	delayed     bool    // waiting in Server.delays until its next message is due
	// again holds, with WithEmulatorRedelivery, the messages nacked or
	// expired, to be delivered again by themselves, in the order they
	// were nacked (redelivery.go).
	again []*entry
}

func (k *keyState) pending() bool { return k.next < len(k.queue) || len(k.again) > 0 }

// delivered counts the messages of the current pass that a tail
// redelivery would send again: every delivered one that is not gone.
func (k *keyState) delivered() int {
	n := 0
	for _, e := range k.queue[:k.next] {
		if !e.gone {
			n++
		}
	}
	return n
}

func (k *keyState) index(e *entry) int { return e.pos - k.base }

func (k *keyState) add(e *entry) {
	e.key = k
	e.pos = k.base + len(k.queue)
	k.queue = append(k.queue, e)
}

// trim drops the acknowledged messages at the head of the queue, which no
// redelivery can bring back any more, and returns them.
func (k *keyState) trim() []*entry {
	n := 0
	for n < len(k.queue) && k.queue[n].acked {
		n++
	}
	if n == 0 {
		return nil
	}
	done := k.queue[:n:n]
	k.queue = k.queue[n:]
	k.base += n
	k.next -= n
	return done
}

// idle reports whether the key holds nothing at all, so its state can go:
// an idle key costs nothing, however many keys there are.
func (k *keyState) idle() bool {
	return len(k.queue) == 0 && k.outstanding == 0 && !k.queued && !k.delayed
}

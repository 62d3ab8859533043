package orderingtest

// Redelivery as Google's Pub/Sub emulator does it. The service, when a
// message of an ordered key is nacked or its lease expires, sends the
// key's whole tail again, in order, from that message on. The emulator
// (the Cloud SDK's pubsub-emulator) sends again only the messages nacked
// or expired, each once, in the order the nacks reached it; and the
// official client sends a nack request's ack IDs from a map, so their
// order is random. A subscriber that keeps a key's order on the service
// may break it there.

// WithEmulatorRedelivery makes the server redeliver as Google's emulator
// does, for tests that a subscriber keeps its order against it: a nacked
// or expired message of an ordered key is delivered again by itself, after
// the other messages nacked before it and before the key's undelivered
// ones, and nothing else of the key is sent again. The default is the
// service's tail redelivery.
func WithEmulatorRedelivery() Option {
	return func(c *config) { c.emulatorRedelivery = true }
}

// againLater queues e, nacked or expired, to be delivered again by itself,
// after the key's other messages waiting to be delivered again.
func (k *keyState) againLater(e *entry) {
	for _, a := range k.again {
		if a == e {
			return
		}
	}
	k.again = append(k.again, e)
}

// takeAgain returns the first message waiting to be delivered again that
// is still to be delivered, dropping those settled meanwhile, or nil.
func (k *keyState) takeAgain() *entry {
	for len(k.again) > 0 {
		e := k.again[0]
		if !e.acked && !e.gone && e.lease == nil {
			return e
		}
		k.again = k.again[1:]
	}
	return nil
}

// head returns the key's next message to deliver: one waiting to be
// delivered again first, or nil if there is none.
func (k *keyState) head() *entry {
	if e := k.takeAgain(); e != nil {
		return e
	}
	if k.next < len(k.queue) {
		return k.queue[k.next]
	}
	return nil
}

package orderingtest

import (
	"cmp"
	"slices"
	"time"
)

// seek models Seek to a time: every message published before t counts as
// acknowledged, and every message published at or after t that the
// subscription can still see counts as unacknowledged and is delivered
// again, payload intact, in publish order.
//
// What the subscription can still see is its backlog, the acknowledged
// messages it retains (retain_acked_messages, within its retention) and, if
// the topic retains messages, everything the topic still holds. The last is
// what lets a new subscription seek to a time before it existed.
// Acknowledged messages that nothing retains are gone, as on the service.
// Outstanding deliveries are forgotten: acks with their ack IDs are ignored.
func (sub *subscription) seek(t time.Time) {
	now := time.Now()
	seen := map[*message]bool{}
	var msgs []*message
	add := func(m *message) {
		if !seen[m] {
			seen[m] = true
			msgs = append(msgs, m)
		}
	}
	for _, k := range sub.keys {
		for _, e := range k.queue {
			add(e.msg)
		}
	}
	for _, e := range sub.loose.all() {
		add(e.msg)
	}
	for _, e := range sub.delayedLoose() {
		add(e.msg)
	}
	for _, l := range sub.leases {
		add(l.entry.msg)
	}
	keep := sub.proto.GetMessageRetentionDuration().AsDuration()
	for _, m := range sub.acked {
		if now.Sub(m.published) <= keep {
			add(m)
		}
	}
	if sub.topic != nil {
		for _, m := range sub.topic.msgs {
			if sub.topic.retained(m, now) {
				add(m)
			}
		}
	}
	slices.SortFunc(msgs, func(a, b *message) int { return cmp.Compare(a.serial, b.serial) })

	sub.reset()
	due := sub.srv.dueAfter(0)
	for _, m := range msgs {
		switch {
		case !m.published.Before(t):
			sub.enqueue(m, due)
		case sub.proto.GetRetainAckedMessages():
			sub.acked = append(sub.acked, m)
		}
	}
	sub.wakeAll()
}

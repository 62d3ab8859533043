package inbox_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"

	"cloud.google.com/go/pubsub/v2"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/keyorder/keyorder/ordering"
	"github.com/keyorder/keyorder/ordering/orderingtest"
	"github.com/keyorder/keyorder/subscriber"
)

// stampKey is the key the honest producer signs with; otherKey one the
// subscriber does not know.
var (
	stampKey = []byte("0123456789abcdef0123456789abcdef")
	otherKey = []byte("fedcba9876543210fedcba9876543210")
)

// signed is one message to publish, its stamp signed with signWith, or
// unsigned when nil; sigOf, when set, is the stamp whose signature it
// carries instead, as a forger that copies a real one would.
type signed struct {
	key, data string
	stamp     ordering.Stamp
	signWith  []byte
	sigOf     *signed
}

func (m signed) attrs(t *testing.T) map[string]string {
	attrs := map[string]string{}
	m.stamp.Put(attrs)
	switch {
	case m.sigOf != nil:
		keys, err := ordering.NewStampKeys(m.sigOf.signWith)
		require.NoError(t, err)
		keys.Sign(attrs, m.sigOf.key, m.sigOf.stamp, []byte(m.sigOf.data))
	case m.signWith != nil:
		keys, err := ordering.NewStampKeys(m.signWith)
		require.NoError(t, err)
		keys.Sign(attrs, m.key, m.stamp, []byte(m.data))
	}
	return attrs
}

func publishSigned(t *testing.T, client *pubsub.Client, topic string, msgs ...signed) {
	t.Helper()
	ctx := timeout(t, testTimeout)
	p := client.Publisher(topic)
	p.EnableMessageOrdering = true
	defer p.Stop()
	var results []*pubsub.PublishResult
	for _, m := range msgs {
		results = append(results, p.Publish(ctx, &pubsub.Message{Data: []byte(m.data), OrderingKey: m.key, Attributes: m.attrs(t)}))
	}
	for _, r := range results {
		_, err := r.Get(ctx)
		require.NoError(t, err)
	}
}

// TestForgedStampsOnTheFake: with keys set, stamps forged ahead of the
// producer's numbers, with its next epoch, with another message's
// signature, or under made-up producer IDs, reach the inbox unstamped:
// they add no row and make no real message a copy, and the real 1, 2, 3
// are applied once each, in order. The service here acks what is not
// proven unapplied, in a handler before the inbox's; the inbox's own
// default, refusing it, would hold the key.
func TestForgedStampsOnTheFake(t *testing.T) {
	eachDatabase(t, func(t *testing.T, db database) {
		ctx := timeout(t, testTimeout)
		srv := orderingtest.Start(t)
		client := connect(t, ctx, srv)
		topic, subID := names()
		sub, err := subscriber.CreateWithTopic(ctx, client, topic, subID, fast, quiet, subscriber.WithStampKey(stampKey))
		require.NoError(t, err)
		one, _ := db.open(t)
		ib := newInbox(t, one, db.dialect)
		var dropped atomic.Int64
		apply := ib.Handler(record(db.dialect))
		stop := run(t, sub, func(ctx context.Context, d *subscriber.Delivery) error {
			if d.Seq == 0 {
				dropped.Add(1)
				return nil // not proven: acked unapplied
			}
			return apply(ctx, d)
		})
		real := func(n uint32) signed {
			return signed{key: "k", data: fmt.Sprintf("k/%d", n), stamp: ordering.Stamp{Producer: "p", Seq: ordering.MakeSeq(0, n)}, signWith: stampKey}
		}
		one1 := real(1)
		forged := []signed{
			{key: "k", data: "ahead", stamp: ordering.Stamp{Producer: "p", Seq: ordering.MakeSeq(0, 50)}},
			{key: "k", data: "next epoch", stamp: ordering.Stamp{Producer: "p", Seq: ordering.MakeSeq(1, 1)}, signWith: otherKey},
			{key: "k", data: "moved", stamp: ordering.Stamp{Producer: "p", Seq: ordering.MakeSeq(0, 9)}, sigOf: &one1},
		}
		for i := range 3 {
			forged = append(forged, signed{key: "k", data: "made up", stamp: ordering.Stamp{Producer: fmt.Sprintf("mallory-%d", i), Seq: ordering.MakeSeq(0, 1)}})
		}
		publishSigned(t, client, topic, forged...)
		publishSigned(t, client, topic, real(1), real(2))
		publishSigned(t, client, topic, forged[1], forged[0])
		publishSigned(t, client, topic, real(3))
		waitApplied(t, srv, one, 3)
		require.NoError(t, srv.WaitFor(ctx, func() bool { return srv.Stats(sub.Name()).Outstanding == 0 && dropped.Load() == int64(len(forged)+2) }))
		stop()
		_, order := applied(t, one)
		assert.Equal(t, map[string][]uint64{"k": {1, 2, 3}}, order, "the real messages, once each, in order")
		assert.Equal(t, 2, count(t, one, `SELECT COUNT(*) FROM keyorder_inbox`), "the made row and (k, p): no row for a forgery")
		assert.Zero(t, ib.Stats().Copies, "no real message taken for a copy")
		assert.Zero(t, ib.Stats().Gaps)
		assert.EqualValues(t, len(forged)+2, sub.Stats().Unverified)
	})
}

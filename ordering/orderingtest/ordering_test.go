package orderingtest_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"cloud.google.com/go/pubsub/v2"
	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/keyorder/keyorder/ordering/orderingtest"
)

// handled collects what a handler processed, in order, per key.
type handled struct {
	mu   sync.Mutex
	seqs map[string][]int
	n    atomic.Int64
}

func (h *handled) add(key string, seq int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.seqs == nil {
		h.seqs = map[string][]int{}
	}
	h.seqs[key] = append(h.seqs[key], seq)
	h.n.Add(1)
}

func (h *handled) of(key string) []int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]int(nil), h.seqs[key]...)
}

// recordAndAck receives on sub, recording and acking every message.
func (f *fixture) recordAndAck(sub string, settings *pubsub.ReceiveSettings) *handled {
	h := &handled{}
	f.receive(sub, settings, func(_ context.Context, m *pubsub.Message) {
		h.add(parse(f.t, m.Data))
		m.Ack()
	})
	return h
}

// breakStreams breaks sub's open streams, which must number n, and waits
// until the client has opened n new ones.
func (f *fixture) breakStreams(sub string, n int) {
	f.t.Helper()
	opened := f.srv.Stats(sub).StreamsOpened
	require.Equal(f.t, n, f.srv.BreakStreams(sub))
	f.waitFor("new streams", func() bool {
		st := f.srv.Stats(sub)
		return st.StreamsOpened == opened+n && st.Streams == n
	})
}

// checkDeliveryLog checks the server's own log of sub: each key's
// deliveries are in order, redelivered tails whole, and a key stays on one
// stream while it has messages outstanding.
func (f *fixture) checkDeliveryLog(sub string) []orderingtest.Delivery {
	f.t.Helper()
	log := f.srv.Deliveries(sub)
	c := orderingtest.NewChecker(orderingtest.AllowRedelivery())
	stream := map[string]int{}
	for _, d := range log {
		c.Record(d.OrderingKey, d.Seq)
		if prev, ok := stream[d.OrderingKey]; ok && d.Outstanding > 0 {
			require.Equal(f.t, prev, d.Stream, "key %s moved streams with %d messages outstanding", d.OrderingKey, d.Outstanding)
		}
		stream[d.OrderingKey] = d.Stream
	}
	require.NoError(f.t, c.Report().Err())
	return log
}

func TestOrderedDeliveryManyKeys(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		keys     int
		perKey   int
		settings pubsub.ReceiveSettings
		opts     []orderingtest.Option
	}{
		{name: "one stream", keys: 50, perKey: 20, settings: pubsub.DefaultReceiveSettings},
		{name: "four streams", keys: 50, perKey: 20, settings: pubsub.ReceiveSettings{NumGoroutines: 4}},
		{name: "tight flow control", keys: 20, perKey: 10, settings: pubsub.ReceiveSettings{MaxOutstandingMessages: 50}},
		{name: "small responses", keys: 20, perKey: 10, settings: pubsub.DefaultReceiveSettings,
			opts: []orderingtest.Option{orderingtest.WithResponseSize(3)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t, nil, tc.opts...)
			ks := keys(tc.keys)
			f.publish(f.topic, ks, 0, tc.perKey)

			var c orderingtest.Checker
			for _, k := range ks {
				c.Expect(k, tc.perKey)
			}
			total := int64(tc.keys * tc.perKey)
			all := make(chan struct{})
			var n atomic.Int64
			stop := f.receive(f.sub, &tc.settings, func(_ context.Context, m *pubsub.Message) {
				c.Record(parse(t, m.Data))
				m.Ack()
				if n.Add(1) == total {
					close(all)
				}
			})
			recv(t, all, "every message")
			f.waitFor("every ack", func() bool { return f.srv.Stats(f.sub).Acked == int(total) })
			stop()

			require.NoError(t, c.Report().Err())
			assert.Len(t, f.checkDeliveryLog(f.sub), int(total), "nothing was redelivered")
		})
	}
}

// TestSeveralOutstandingPerKey shows the fake is not stop-and-wait: while
// the handler still holds a key's first message, the rest of the key is
// already delivered, in order, as the service does.
func TestSeveralOutstandingPerKey(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	f.publish(f.topic, []string{"k"}, 0, 10)

	release := make(chan struct{})
	var h handled
	f.receive(f.sub, nil, func(_ context.Context, m *pubsub.Message) {
		key, seq := parse(t, m.Data)
		if seq == 1 {
			<-release
		}
		h.add(key, seq)
		m.Ack()
	})
	f.waitFor("all ten delivered", func() bool { return len(f.srv.Deliveries(f.sub)) == 10 })
	log := f.srv.Deliveries(f.sub)
	assert.Equal(t, 9, log[9].Outstanding, "the tenth went out with nine outstanding")
	assert.Empty(t, h.of("k"), "the handler is still on the first message")
	close(release)

	f.waitFor("all acked", func() bool { return f.srv.Stats(f.sub).Acked == 10 })
	assert.Equal(t, []int{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, h.of("k"))
	f.checkDeliveryLog(f.sub)
}

// TestTailRedeliveryAfterNack: when message 3 is nacked after 4 and 5 were
// acknowledged, 3, 4 and 5 all come again, in order; other keys do not.
func TestTailRedeliveryAfterNack(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	f.publish(f.topic, []string{"k", "other"}, 0, 5)

	held := make(chan *pubsub.Message, 1)
	var h handled
	var once sync.Once
	f.receive(f.sub, nil, func(_ context.Context, m *pubsub.Message) {
		key, seq := parse(t, m.Data)
		h.add(key, seq)
		if key == "k" && seq == 3 {
			hold := false
			once.Do(func() { hold = true })
			if hold {
				held <- m // decided below, after 4 and 5 are acknowledged
				return
			}
		}
		m.Ack()
	})
	m3 := recv(t, held, "message 3")
	f.waitFor("1, 2, 4, 5 and other's five acked", func() bool { return f.srv.Stats(f.sub).Acked == 9 })
	m3.Nack()

	f.waitFor("the tail acked again", func() bool { return f.srv.Stats(f.sub).Acked == 12 })
	assert.Equal(t, []int{1, 2, 3, 4, 5, 3, 4, 5}, h.of("k"))
	assert.Equal(t, []int{1, 2, 3, 4, 5}, h.of("other"))
	st := f.srv.Stats(f.sub)
	assert.Equal(t, 1, st.Nacked)
	assert.Equal(t, 0, st.Outstanding)

	var attempts []int
	for _, d := range f.checkDeliveryLog(f.sub) {
		if d.OrderingKey == "k" && d.Seq >= 3 {
			attempts = append(attempts, d.Attempt)
		}
	}
	// Only the nacked message used up an attempt; its tail did not.
	assert.Equal(t, []int{1, 1, 1, 2, 1, 1}, attempts)
}

// TestRedeliveryAfterDeadlineExpiry: a message neither acked nor nacked
// comes back once its lease runs out, with its key's tail.
func TestRedeliveryAfterDeadlineExpiry(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil, orderingtest.WithAckDeadline(time.Second))
	f.publish(f.topic, []string{"k"}, 0, 3)

	var stale atomic.Pointer[pubsub.Message]
	var h handled
	f.receive(f.sub, nil, func(_ context.Context, m *pubsub.Message) {
		key, seq := parse(t, m.Data)
		h.add(key, seq)
		if seq == 2 && stale.CompareAndSwap(nil, m) {
			return // neither acked nor nacked: the lease will expire
		}
		m.Ack()
	})
	f.waitFor("the tail acked again", func() bool { return f.srv.Stats(f.sub).Acked == 4 })
	stale.Load().Ack() // an ack ID from before the redelivery: ignored, and lets Receive stop

	assert.Equal(t, []int{1, 2, 3, 2, 3}, h.of("k"))
	st := f.srv.Stats(f.sub)
	assert.Equal(t, 1, st.Expired)
	assert.Equal(t, 4, st.Acked, "the stale ack was not applied")
	log := f.checkDeliveryLog(f.sub)
	require.Len(t, log, 5)
	assert.Equal(t, 2, log[3].Attempt, "an expired lease counts as a delivery attempt")
}

// TestAffinityWhileOutstanding: with four streams, a key whose first message
// is still being handled gets every later message on the same stream, even
// when each is published on its own.
func TestAffinityWhileOutstanding(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	ks := keys(20)
	release := make(chan struct{})
	f.receive(f.sub, &pubsub.ReceiveSettings{NumGoroutines: 4}, func(_ context.Context, m *pubsub.Message) {
		if _, seq := parse(t, m.Data); seq == 1 {
			<-release
		}
		m.Ack()
	})
	f.waitFor("four streams", func() bool { return f.srv.Stats(f.sub).Streams == 4 })
	for seq := 1; seq <= 5; seq++ {
		f.publish(f.topic, ks, seq-1, 1) // one message per key per publish
	}
	f.waitFor("every message delivered", func() bool { return len(f.srv.Deliveries(f.sub)) == 100 })
	close(release)
	f.waitFor("every message acked", func() bool { return f.srv.Stats(f.sub).Acked == 100 })

	streams := map[int]bool{}
	held := 0
	for _, d := range f.checkDeliveryLog(f.sub) {
		streams[d.Stream] = true
		if d.Outstanding > 0 {
			held++
		}
	}
	assert.Equal(t, 80, held, "messages 2 to 5 of each key went out while 1 was held")
	t.Logf("keys spread over %d streams", len(streams))
}

// TestAffinityShiftAfterBrokenStream: once its stream breaks, a key waits
// until its outstanding message settles, then moves to the new stream.
func TestAffinityShiftAfterBrokenStream(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	held := make(chan *pubsub.Message, 1)
	var h handled
	f.receive(f.sub, nil, func(_ context.Context, m *pubsub.Message) {
		key, seq := parse(t, m.Data)
		h.add(key, seq)
		if seq == 1 {
			held <- m
			return
		}
		m.Ack()
	})
	f.publish(f.topic, []string{"k"}, 0, 1)
	m1 := recv(t, held, "message 1")
	f.publish(f.topic, []string{"k"}, 1, 1)
	f.waitFor("message 2 acked", func() bool { return f.srv.Stats(f.sub).Acked == 1 })

	f.breakStreams(f.sub, 1)
	f.publish(f.topic, []string{"k"}, 2, 1)
	assert.Len(t, f.srv.Deliveries(f.sub), 2, "message 3 waits while message 1 is outstanding")

	m1.Ack() // the client acks outside the stream, so this still counts
	f.waitFor("message 3 acked", func() bool { return f.srv.Stats(f.sub).Acked == 3 })
	log := f.checkDeliveryLog(f.sub)
	require.Len(t, log, 3)
	assert.Equal(t, log[0].Stream, log[1].Stream)
	assert.NotEqual(t, log[0].Stream, log[2].Stream, "the key moved to the new stream")
	assert.Equal(t, 0, log[2].Outstanding)
	assert.Equal(t, []int{1, 2, 3}, h.of("k"))
}

// TestUnorderedDelivery: without ordering, a key's messages go to every
// stream with room, concurrently.
func TestUnorderedDelivery(t *testing.T) {
	t.Parallel()
	f := newFixture(t, func(s *pubsubpb.Subscription) { s.EnableMessageOrdering = false })
	var n atomic.Int64
	all := make(chan struct{})
	f.receive(f.sub, &pubsub.ReceiveSettings{NumGoroutines: 2, MaxOutstandingMessages: 10}, func(_ context.Context, m *pubsub.Message) {
		m.Ack()
		if n.Add(1) == 100 {
			close(all)
		}
	})
	f.waitFor("two streams", func() bool { return f.srv.Stats(f.sub).Streams == 2 })
	f.publish(f.topic, []string{"k"}, 0, 100)
	recv(t, all, "every message")

	streams := map[int]int{}
	for _, d := range f.srv.Deliveries(f.sub) {
		streams[d.Stream]++
	}
	assert.Len(t, streams, 2, "one key's messages went to both streams: %v", streams)
}

// TestPullOneBatchPerKey: Pull hands out a key's messages one batch at a
// time, as the service does for pull subscribers.
func TestPullOneBatchPerKey(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	sc := f.client.SubscriptionAdminClient
	f.publish(f.topic, []string{"k", "j"}, 0, 2)

	res, err := sc.Pull(f.ctx, &pubsubpb.PullRequest{Subscription: f.sub, MaxMessages: 10})
	require.NoError(t, err)
	var got []string
	var ackIDs []string
	for _, rm := range res.ReceivedMessages {
		got = append(got, string(rm.Message.Data))
		if rm.Message.OrderingKey == "k" {
			ackIDs = append(ackIDs, rm.AckId)
		}
	}
	assert.ElementsMatch(t, []string{"k/1", "k/2", "j/1", "j/2"}, got)

	f.publish(f.topic, []string{"k"}, 2, 1)
	assert.Empty(t, f.pullNow(f.sub, 10), "k's first batch is still outstanding")

	require.NoError(t, sc.Acknowledge(f.ctx, &pubsubpb.AcknowledgeRequest{Subscription: f.sub, AckIds: ackIDs}))
	res, err = sc.Pull(f.ctx, &pubsubpb.PullRequest{Subscription: f.sub, MaxMessages: 10})
	require.NoError(t, err)
	require.Len(t, res.ReceivedMessages, 1)
	assert.Equal(t, "k/3", string(res.ReceivedMessages[0].Message.Data))

	// A Pull that finds nothing waits for a message.
	pulled := make(chan *pubsubpb.PullResponse, 1)
	go func() {
		res, err := sc.Pull(f.ctx, &pubsubpb.PullRequest{Subscription: f.sub, MaxMessages: 10})
		assert.NoError(t, err)
		pulled <- res
	}()
	// Whether the Pull is already waiting or not, it must return x/1.
	f.publish(f.topic, []string{"x"}, 0, 1)
	res = recv(t, pulled, "the waiting Pull")
	require.Len(t, res.ReceivedMessages, 1)
	assert.Equal(t, "x/1", string(res.ReceivedMessages[0].Message.Data))
}

// TestPullFillsAcrossKeys: a Pull that fills up leaves the keys it had no
// room for to later Pull calls.
func TestPullFillsAcrossKeys(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	f.publish(f.topic, []string{"k", "j", "i"}, 0, 1)
	var got []string
	for range 3 {
		msgs := f.pullNow(f.sub, 1)
		require.Len(t, msgs, 1)
		got = append(got, string(msgs[0].Message.Data))
	}
	assert.ElementsMatch(t, []string{"k/1", "j/1", "i/1"}, got)
}

// TestEmulatorRedelivery: with WithEmulatorRedelivery, as on Google's
// emulator, a nacked message comes again by itself: 3, nacked after 4 and
// 5 were acknowledged, comes back alone, and 4 and 5 do not.
func TestEmulatorRedelivery(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil, orderingtest.WithEmulatorRedelivery())
	f.publish(f.topic, []string{"k"}, 0, 5)

	held := make(chan *pubsub.Message, 1)
	var h handled
	var once sync.Once
	f.receive(f.sub, nil, func(_ context.Context, m *pubsub.Message) {
		key, seq := parse(t, m.Data)
		h.add(key, seq)
		if seq == 3 {
			hold := false
			once.Do(func() { hold = true })
			if hold {
				held <- m
				return
			}
		}
		m.Ack()
	})
	m3 := recv(t, held, "message 3")
	f.waitFor("1, 2, 4 and 5 acked", func() bool { return f.srv.Stats(f.sub).Acked == 4 })
	m3.Nack()
	f.waitFor("3 acked", func() bool { return f.srv.Stats(f.sub).Acked == 5 })
	assert.Equal(t, []int{1, 2, 3, 4, 5, 3}, h.of("k"), "only the nacked message came again")
}

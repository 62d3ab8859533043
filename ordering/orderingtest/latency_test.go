package orderingtest_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"cloud.google.com/go/pubsub/v2"
	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/keyorder/keyorder/ordering/orderingtest"
)

// slack is how much longer than it should a step may take in these tests:
// the fake's and the client's own work, under the race detector.
const slack = 200 * time.Millisecond

// TestLatencyRoundTrip: with latency d, a message published by a Publish
// call reaches a handler at least 2d after the call began, a trip for the
// publish and one for the delivery, and less than 3d after, even with 100
// publishes in flight at once: latency delays, it does not serialise. Had
// any message waited for another's trip, it would have taken 3d at least.
//
// d is large enough for the fake's and the client's own work, under the
// race detector, to fit in the last d; and the test does not run in
// parallel with the package's other tests, whose load would stretch it.
func TestLatencyRoundTrip(t *testing.T) {
	const d, n = 300 * time.Millisecond, 100
	f := newFixture(t, nil, orderingtest.WithLatency(d))
	var mu sync.Mutex
	got := map[string]time.Time{}
	all := make(chan struct{})
	f.receive(f.sub, nil, func(_ context.Context, m *pubsub.Message) {
		at := time.Now()
		m.Ack()
		mu.Lock()
		defer mu.Unlock()
		got[string(m.Data)] = at
		if len(got) == n {
			close(all)
		}
	})
	f.waitFor("a stream", func() bool { return f.srv.Stats(f.sub).Streams > 0 })

	sent := make([]time.Time, n)
	answered := make([]time.Duration, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sent[i] = time.Now()
			_, err := f.client.TopicAdminClient.Publish(f.ctx, &pubsubpb.PublishRequest{
				Topic:    f.topic,
				Messages: []*pubsubpb.PubsubMessage{{Data: []byte(payload(fmt.Sprint("k", i), 1)), OrderingKey: fmt.Sprint("k", i)}},
			})
			answered[i] = time.Since(sent[i])
			assert.NoError(t, err)
		}()
	}
	wg.Wait()
	recv(t, all, "every message")

	mu.Lock()
	defer mu.Unlock()
	var slowest time.Duration
	for i := range n {
		assert.GreaterOrEqual(t, answered[i], d, "publish %d answered before the latency", i)
		rt := got[payload(fmt.Sprint("k", i), 1)].Sub(sent[i])
		slowest = max(slowest, rt)
		assert.GreaterOrEqual(t, rt, 2*d, "message %d arrived early", i)
		assert.Less(t, rt, 3*d, "message %d arrived late: latency serialised", i)
	}
	t.Logf("slowest round trip: %v", slowest)
}

// TestLatencyRedelivery: a nacked message becomes deliverable when it is
// nacked and comes back d later, with its key's tail, in order; a Pull
// that does not wait finds nothing before then.
func TestLatencyRedelivery(t *testing.T) {
	t.Parallel()
	const d = 300 * time.Millisecond
	f := newFixture(t, nil, orderingtest.WithLatency(d))
	sc := f.client.SubscriptionAdminClient
	_, err := f.client.TopicAdminClient.Publish(f.ctx, &pubsubpb.PublishRequest{Topic: f.topic, Messages: []*pubsubpb.PubsubMessage{
		{Data: []byte("k/1"), OrderingKey: "k"}, {Data: []byte("k/2"), OrderingKey: "k"}, {Data: []byte("k/3"), OrderingKey: "k"},
	}})
	require.NoError(t, err)
	res, err := sc.Pull(f.ctx, &pubsubpb.PullRequest{Subscription: f.sub, MaxMessages: 10})
	require.NoError(t, err)
	require.Len(t, res.ReceivedMessages, 3)
	published := f.srv.Messages(f.topic)[0].PublishTime
	assert.GreaterOrEqual(t, f.srv.Deliveries(f.sub)[0].At.Sub(published), d, "delivered d after the publish answered")

	rms := res.ReceivedMessages
	require.NoError(t, sc.Acknowledge(f.ctx, &pubsubpb.AcknowledgeRequest{Subscription: f.sub, AckIds: []string{rms[0].AckId}}))
	nacked := time.Now()
	require.NoError(t, sc.ModifyAckDeadline(f.ctx, &pubsubpb.ModifyAckDeadlineRequest{
		Subscription: f.sub, AckIds: []string{rms[1].AckId}, AckDeadlineSeconds: 0,
	}))
	assert.Empty(t, f.pullNow(f.sub, 10), "nothing is due yet")

	res, err = sc.Pull(f.ctx, &pubsubpb.PullRequest{Subscription: f.sub, MaxMessages: 10})
	require.NoError(t, err)
	var data []string
	for _, rm := range res.ReceivedMessages {
		data = append(data, string(rm.Message.Data))
	}
	assert.Equal(t, []string{"k/2", "k/3"}, data, "the tail, in order")
	log := f.srv.Deliveries(f.sub)
	require.Len(t, log, 5)
	for _, dl := range log[3:] {
		assert.GreaterOrEqual(t, dl.At.Sub(nacked), d, "redelivered d after the nack")
	}
}

// TestLatencyUnordered: messages without order wait as long, and a Seek
// while messages wait delivers each of them once: those of a key, which
// wait in its queue, and those without, which wait on their own.
func TestLatencyUnordered(t *testing.T) {
	t.Parallel()
	const d = 200 * time.Millisecond
	f := newFixture(t, nil, orderingtest.WithLatency(d))
	sc := f.client.SubscriptionAdminClient
	start := time.Now()
	for _, m := range []*pubsubpb.PubsubMessage{{Data: []byte("b"), OrderingKey: "k"}, {Data: []byte("a")}} {
		_, err := f.client.TopicAdminClient.Publish(f.ctx, &pubsubpb.PublishRequest{Topic: f.topic, Messages: []*pubsubpb.PubsubMessage{m}})
		require.NoError(t, err)
	}
	// a waits for delivery now, for d, unless the Seek takes longer to
	// arrive; Seek sends both back to wait again.
	_, err := sc.Seek(f.ctx, &pubsubpb.SeekRequest{Subscription: f.sub, Target: &pubsubpb.SeekRequest_Time{Time: timestamppb.New(start)}})
	require.NoError(t, err)

	var data []string
	for len(data) < 2 {
		res, err := sc.Pull(f.ctx, &pubsubpb.PullRequest{Subscription: f.sub, MaxMessages: 10})
		require.NoError(t, err)
		for _, rm := range res.ReceivedMessages {
			data = append(data, string(rm.Message.Data))
		}
	}
	assert.ElementsMatch(t, []string{"a", "b"}, data)
	for _, dl := range f.srv.Deliveries(f.sub) {
		assert.GreaterOrEqual(t, dl.At.Sub(start), 2*d)
	}

	// What waited before the Seek is void: a Pull that waits well past
	// its time gets nothing more.
	ctx, cancel := context.WithTimeout(f.ctx, 2*d)
	defer cancel()
	_, err = sc.Pull(ctx, &pubsubpb.PullRequest{Subscription: f.sub, MaxMessages: 10})
	assert.Equal(t, codes.DeadlineExceeded, status.Code(err), "%v", err)
	assert.Len(t, f.srv.Deliveries(f.sub), 2, "each message delivered once")
}

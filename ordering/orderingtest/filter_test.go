package orderingtest_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"cloud.google.com/go/pubsub/v2"
	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/durationpb"
)

// TestFilteredSubscription checks that a subscription with a filter
// receives, in order, only the messages that match it, both as they are
// published and when it seeks back over a topic that retains messages,
// while a subscription without one receives everything.
func TestFilteredSubscription(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	topic := topicName("retained")
	f.createTopic(&pubsubpb.Topic{Name: topic, MessageRetentionDuration: durationpb.New(time.Hour)})
	filtered := subName("filtered")
	f.createSubscription(&pubsubpb.Subscription{
		Name: filtered, Topic: topic, EnableMessageOrdering: true,
		Filter: `attributes.park = "p1" OR attributes:all`,
	})
	got, err := f.client.SubscriptionAdminClient.GetSubscription(f.ctx, &pubsubpb.GetSubscriptionRequest{Subscription: filtered})
	require.NoError(t, err)
	assert.Equal(t, `attributes.park = "p1" OR attributes:all`, got.Filter)

	p := f.client.Publisher(topic)
	p.EnableMessageOrdering = true
	publish := func(data string, attrs map[string]string) {
		_, err := p.Publish(f.ctx, &pubsub.Message{Data: []byte(data), Attributes: attrs, OrderingKey: "k"}).Get(f.ctx)
		require.NoError(t, err)
	}
	start := time.Now()
	publish("k/1", map[string]string{"park": "p1"})
	publish("k/2", map[string]string{"park": "p2"})
	publish("k/3", map[string]string{"all": ""})
	publish("k/4", nil)
	publish("k/5", map[string]string{"park": "p1", "other": "x"})
	p.Stop()
	want := []string{"k/1", "k/3", "k/5"}

	data, stop := f.receiveData(filtered)
	f.waitFor("the matching messages", func() bool { return len(data()) == len(want) })
	// The rest of the key would follow the last match at once if it were
	// delivered at all.
	stop()
	assert.Equal(t, want, data())
	assert.Equal(t, len(want), f.srv.Stats(filtered).Delivered)

	// Seek once the server has seen the stream close: messages sent back
	// onto a stream the client has left wait out their lease, here as on
	// the service.
	f.waitFor("the stream to close", func() bool { return f.srv.Stats(filtered).Streams == 0 })
	f.seek(filtered, start)
	data, stop = f.receiveData(filtered)
	f.waitFor("the matching messages again", func() bool { return len(data()) == len(want) })
	stop()
	assert.Equal(t, want, data())

	// A subscription created afterwards, without a filter, seeks back to
	// every message.
	all := subName("all")
	f.createSubscription(&pubsubpb.Subscription{Name: all, Topic: topic, EnableMessageOrdering: true})
	f.seek(all, start)
	var n atomic.Int32
	stop = f.receive(all, nil, func(_ context.Context, m *pubsub.Message) { n.Add(1); m.Ack() })
	f.waitFor("every message", func() bool { return f.srv.Stats(all).Acked == 5 })
	stop()
	assert.Equal(t, int32(5), n.Load())
}

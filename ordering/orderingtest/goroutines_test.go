package orderingtest_test

import (
	"context"
	"testing"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/keyorder/keyorder/internal/harness"
	"github.com/keyorder/keyorder/ordering/orderingtest"
)

// TestIgnoreGoroutines: what the official client leaves running after a
// Receive on the fake has returned, and its client is closed, is what
// IgnoreGoroutines lists, so a user's goleak check passes with it. Not
// parallel: other tests' goroutines would be counted.
func TestIgnoreGoroutines(t *testing.T) {
	before := goleak.IgnoreCurrent()
	srv, err := orderingtest.New()
	require.NoError(t, err)
	client, err := harness.Connect(context.Background(), srv.Addr)
	require.NoError(t, err)
	f := &fixture{t: t, ctx: harness.Context(t, testTimeout), srv: srv, client: client, topic: topicName("topic"), sub: subName("sub")}
	f.createTopic(&pubsubpb.Topic{Name: f.topic})
	f.createSubscription(&pubsubpb.Subscription{Name: f.sub, Topic: f.topic, EnableMessageOrdering: true})
	f.publish(f.topic, []string{"k"}, 0, 3)
	_, stop := f.receiveData(f.sub)
	f.waitFor("the messages acked", func() bool { return srv.Stats(f.sub).Acked == 3 })
	stop()
	require.NoError(t, client.Close())
	require.NoError(t, srv.Close())
	assert.NoError(t, goleak.Find(append(orderingtest.IgnoreGoroutines(), before)...))
}

package harness_test

import (
	"context"
	"testing"
	"time"

	"cloud.google.com/go/pubsub/v2"
	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"github.com/keyorder/keyorder/internal/leaktest"
	"github.com/stretchr/testify/require"

	"github.com/keyorder/keyorder/internal/harness"
)

func TestMain(m *testing.M) { leaktest.VerifyTestMain(m) }

func TestPstestRoundTrip(t *testing.T) {
	srv, client := harness.Pstest(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	topic, err := client.TopicAdminClient.CreateTopic(ctx, &pubsubpb.Topic{
		Name: "projects/" + harness.Project + "/topics/t",
	})
	require.NoError(t, err)

	p := client.Publisher(topic.Name)
	defer p.Stop()
	p.EnableMessageOrdering = true
	id, err := p.Publish(ctx, &pubsub.Message{Data: []byte("hello"), OrderingKey: "k"}).Get(ctx)
	require.NoError(t, err)

	msg := srv.Message(id)
	require.NotNil(t, msg)
	require.Equal(t, "hello", string(msg.Data))
	require.Equal(t, "k", msg.OrderingKey)
}

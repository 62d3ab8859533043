package harness_test

import (
	"context"
	"testing"
	"time"

	"cloud.google.com/go/pubsub/v2"
	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"github.com/googleapis/gax-go/v2"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/keyorder/keyorder/internal/leaktest"

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

// TestPstestTakesBigMessages publishes a 6 MB message, over gRPC's default
// 4 MiB limit and under the service's 10 MB: pstest's own server refuses
// it, the harness's serves it.
func TestPstestTakesBigMessages(t *testing.T) {
	srv, err := harness.StartPstest("127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, srv.Close()) })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	topic := "projects/" + harness.Project + "/topics/big"
	msg := &pubsubpb.PublishRequest{Topic: topic, Messages: []*pubsubpb.PubsubMessage{{Data: make([]byte, 6<<20)}}}

	for _, tc := range []struct {
		name string
		addr string
		ok   bool
	}{
		{"pstest's own server", srv.Server.Addr, false},
		{"the harness's server", srv.Addr, true},
	} {
		client := harness.Client(t, tc.addr)
		if _, err := client.TopicAdminClient.GetTopic(ctx, &pubsubpb.GetTopicRequest{Topic: topic}); err != nil {
			_, err = client.TopicAdminClient.CreateTopic(ctx, &pubsubpb.Topic{Name: topic})
			require.NoError(t, err)
		}
		// One attempt, without the official publisher's retries.
		_, err := client.TopicAdminClient.Publish(ctx, msg, gax.WithRetry(nil))
		if tc.ok {
			require.NoError(t, err, tc.name)
		} else {
			require.Equal(t, codes.ResourceExhausted, status.Code(err), "%s: %v", tc.name, err)
		}
	}
	require.Len(t, srv.Messages(), 1)
}

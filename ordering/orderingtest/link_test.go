package orderingtest_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/keyorder/keyorder/internal/harness"
	"github.com/keyorder/keyorder/ordering/orderingtest"
)

// TestLink: a call through a hung link waits for its deadline, and goes
// through on the same connection once the link is restored; a call
// through a cut link fails, and a new connection goes through once it is
// restored.
func TestLink(t *testing.T) {
	t.Parallel()
	srv := orderingtest.Start(t)
	link := orderingtest.StartLink(t, srv.Addr)
	client := harness.Client(t, link.Addr)
	admin := client.TopicAdminClient
	get := func(d time.Duration) error {
		ctx, cancel := context.WithTimeout(context.Background(), d)
		defer cancel()
		_, err := admin.GetTopic(ctx, &pubsubpb.GetTopicRequest{Topic: topicName("linked")})
		return err
	}
	_, err := admin.CreateTopic(harness.Context(t, testTimeout), &pubsubpb.Topic{Name: topicName("linked")})
	require.NoError(t, err)

	link.Hang()
	began := time.Now()
	err = get(300 * time.Millisecond)
	assert.True(t, status.Code(err) == codes.DeadlineExceeded || errors.Is(err, context.DeadlineExceeded), "hung: %v", err)
	assert.GreaterOrEqual(t, time.Since(began), 300*time.Millisecond, "the call waited for its deadline")
	link.Restore()
	require.NoError(t, get(testTimeout), "restored")

	link.Cut()
	err = get(300 * time.Millisecond)
	// A cut link fails the call: at once with Unavailable once the client
	// has seen its connection refused, or at the deadline while the client
	// is still reconnecting, which a loaded machine makes common.
	code := status.Code(err)
	assert.True(t, code == codes.Unavailable || code == codes.DeadlineExceeded || errors.Is(err, context.DeadlineExceeded), "cut: %v", err)
	link.Restore()
	require.NoError(t, get(testTimeout), "restored after a cut")

	require.NoError(t, link.Close())
	require.NoError(t, link.Close(), "Close is idempotent")
}

package subscriber_test

import (
	"testing"

	"cloud.google.com/go/pubsub/v2"
	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/api/option"

	"github.com/keyorder/keyorder/internal/harness"
	"github.com/keyorder/keyorder/ordering/orderingtest"
	"github.com/keyorder/keyorder/subscriber"
)

// TestRegionalEndpoint: on Google Cloud, RegionalEndpoint pins a client to
// the region's locational endpoint; with PUBSUB_EMULATOR_HOST set, it
// leaves the client to the emulator, where an endpoint option would send
// every call elsewhere. Not parallel: it sets the environment.
func TestRegionalEndpoint(t *testing.T) {
	t.Setenv("PUBSUB_EMULATOR_HOST", "")
	assert.Equal(t, []option.ClientOption{option.WithEndpoint("europe-west1-pubsub.googleapis.com:443")},
		subscriber.RegionalEndpoint("europe-west1"))
	assert.Empty(t, subscriber.RegionalEndpoint(""), "the global endpoint")

	srv := orderingtest.Start(t)
	t.Setenv("PUBSUB_EMULATOR_HOST", srv.Addr)
	require.Empty(t, subscriber.RegionalEndpoint("europe-west1"))
	ctx := testContext(t)
	client, err := pubsub.NewClient(ctx, harness.Project, subscriber.RegionalEndpoint("europe-west1")...)
	require.NoError(t, err)
	defer client.Close()
	_, err = client.TopicAdminClient.CreateTopic(ctx, &pubsubpb.Topic{Name: path(client, "topics", "regional")})
	require.NoError(t, err, "the client reached the emulator")
}

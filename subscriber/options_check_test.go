package subscriber_test

import (
	"testing"
	"time"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/keyorder/keyorder/internal/harness"
	"github.com/keyorder/keyorder/subscriber"
)

// TestContradictoryOptions: options that contradict each other, or do
// nothing where they are given, are refused with ErrInvalidConfig and a
// message that names the fix, before anything is made: the topic and
// subscription stay missing.
func TestContradictoryOptions(t *testing.T) {
	t.Parallel()
	const endpoint = "https://ledger.example.com/push"
	const pusher = "pusher@ledger.iam.gserviceaccount.com"
	for _, tc := range []struct {
		name string
		opts []subscriber.Option
		want string
	}{
		{"push auth and unauthenticated push", []subscriber.Option{subscriber.WithPush(endpoint),
			subscriber.WithPushAuth(pusher, ""), subscriber.WithUnauthenticatedPush()}, "keep WithPushAuth, or drop it"},
		{"push auth with no email", []subscriber.Option{subscriber.WithPush(endpoint), subscriber.WithPushAuth("not-an-email", "")}, "not a service account's email"},
		{"push auth with a bare domain", []subscriber.Option{subscriber.WithPush(endpoint), subscriber.WithPushAuth("pusher@localhost", "")}, "not a service account's email"},
		{"push auth with a space", []subscriber.Option{subscriber.WithPush(endpoint), subscriber.WithPushAuth("push er@a.com", "")}, "not a service account's email"},
		{"push auth on a pull subscription", []subscriber.Option{subscriber.WithPushAuth(pusher, "")}, "drop WithPushAuth, or add WithPush"},
		{"unauthenticated push on a pull subscription", []subscriber.Option{subscriber.WithUnauthenticatedPush()}, "drop WithUnauthenticatedPush, or add WithPush"},
		{"a parking wait without parking", []subscriber.Option{subscriber.WithParkingWait(time.Second)}, "add WithParking, or drop WithParkingWait"},
		{"a drain shorter than the parking wait", []subscriber.Option{subscriber.WithParking("parked"),
			subscriber.WithDrainTimeout(time.Second)}, "make the drain timeout at least the parking wait"},
		{"a drain shorter than a parking wait given", []subscriber.Option{subscriber.WithParking("parked"),
			subscriber.WithParkingWait(3 * time.Second), subscriber.WithDrainTimeout(2 * time.Second)}, "WithDrainTimeout(2s) with a parking wait of 3s"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			srv, client := harness.Pstest(t)
			topic, sub := names()
			_, err := subscriber.CreateWithTopic(testContext(t), client, topic, sub, tc.opts...)
			require.ErrorIs(t, err, subscriber.ErrInvalidConfig)
			assert.Contains(t, err.Error(), tc.want)
			assert.Empty(t, srv.Messages(), "nothing was published")
			_, err = client.SubscriptionAdminClient.GetSubscription(testContext(t), &pubsubpb.GetSubscriptionRequest{Subscription: path(client, "subscriptions", sub)})
			assert.Error(t, err, "the subscription was not made")
		})
	}
}

// TestConsistentOptions: the options that go together are taken, and
// Open takes push authentication for a push subscription that exists.
func TestConsistentOptions(t *testing.T) {
	t.Parallel()
	_, client := harness.Pstest(t)
	ctx := testContext(t)
	topic, sub := names()
	_, err := subscriber.CreateWithTopic(ctx, client, topic, sub, subscriber.WithParking("parked-"+topic),
		subscriber.WithParkingWait(500*time.Millisecond), subscriber.WithDrainTimeout(time.Second))
	require.NoError(t, err)
	_, err = subscriber.Open(ctx, client, sub, subscriber.WithParking("parked-"+topic), subscriber.WithDrainTimeout(2*time.Second))
	require.NoError(t, err, "a drain as long as the default wait")

	topic, sub = names()
	_, err = subscriber.CreateWithTopic(ctx, client, topic, sub, subscriber.WithPush("https://ledger.example.com/push"),
		subscriber.WithPushAuth("pusher@ledger.iam.gserviceaccount.com", ""))
	require.NoError(t, err)
	_, err = subscriber.Open(ctx, client, sub, subscriber.WithPushAuth("pusher@ledger.iam.gserviceaccount.com", ""))
	require.NoError(t, err, "a push subscription opened with its authentication")
}

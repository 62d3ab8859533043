package inbox_test

import (
	"net/http/httptest"
	"testing"
	"time"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/keyorder/keyorder/ordering/orderingtest"
	"github.com/keyorder/keyorder/subscriber"
	"github.com/keyorder/keyorder/subscriber/inbox"
)

// TestUnorderedPush: on an unordered push subscription, a key's messages
// are pushed at once, in any order, and each one waiting on a gap is
// answered 500 and pushed again within the service's backoff, many times
// a second. Number 10 never comes: the waiting ones share the row's one
// clock, and every other number is applied, once, soon after WithGapWait.
func TestUnorderedPush(t *testing.T) {
	eachDatabase(t, func(t *testing.T, db database) {
		ctx := timeout(t, testTimeout)
		srv := orderingtest.Start(t)
		client := connect(t, ctx, srv)
		validator, err := srv.TokenValidator(ctx)
		require.NoError(t, err)
		var endpoint swappable
		web := httptest.NewServer(&endpoint)
		t.Cleanup(web.Close)
		topic, subID := names()
		_, err = client.TopicAdminClient.CreateTopic(ctx, &pubsubpb.Topic{Name: "projects/inbox-test/topics/" + topic})
		require.NoError(t, err)
		_, err = client.SubscriptionAdminClient.CreateSubscription(ctx, &pubsubpb.Subscription{
			Name: "projects/inbox-test/subscriptions/" + subID, Topic: "projects/inbox-test/topics/" + topic,
			PushConfig: &pubsubpb.PushConfig{
				PushEndpoint:         web.URL,
				AuthenticationMethod: &pubsubpb.PushConfig_OidcToken_{OidcToken: &pubsubpb.PushConfig_OidcToken{ServiceAccountEmail: pusher}},
			},
			RetryPolicy: &pubsubpb.RetryPolicy{MinimumBackoff: durationpb.New(50 * time.Millisecond), MaximumBackoff: durationpb.New(100 * time.Millisecond)},
		})
		require.NoError(t, err)
		sub, err := subscriber.Open(ctx, client, subID, subscriber.WithTokenValidator(validator), quiet)
		require.NoError(t, err)
		require.False(t, sub.Ordered())
		one, _ := db.open(t)
		const wait = time.Second
		ib := newInbox(t, one, db.dialect, inbox.WithGapWait(wait))
		endpoint.set(sub.PushHandler(ib.Handler(record(db.dialect))))

		const n, lost = 20, 10
		var msgs []stamped
		for i := uint32(1); i <= n; i++ {
			if i != lost {
				msgs = append(msgs, stamped{key: "k", n: i})
			}
		}
		began := time.Now()
		publishStamped(t, client, topic, msgs...)
		waitApplied(t, srv, one, n-1)
		took := time.Since(began)
		require.NoError(t, sub.Close(ctx))
		times, _ := applied(t, one)
		assert.Len(t, times, n-1)
		for k, c := range times {
			assert.Equal(t, 1, c, k)
		}
		assert.Less(t, took, 10*wait, "one wait, not one per push")
		t.Logf("applied in %v; %d pushes answered 500; inbox %+v", took, srv.Stats(sub.Name()).Nacked, ib.Stats())
	})
}

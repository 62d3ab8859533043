package subscriber_test

import (
	"context"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/keyorder/keyorder/internal/metrictest"
	"github.com/keyorder/keyorder/subscriber"
)

// TestPushUnkeyedRunsWithoutTheControlLog: once a push endpoint's control
// log is no longer followed (its follower's subscription deleted), it
// cannot tell which keys are parked, so keyed pushes are answered 503;
// a push without a key has no order parking keeps, and runs: 204, its
// handler called. The Error log says just that.
//
// It runs alone, before the parallel tests: among them, under load, the
// endpoint was seen not to learn of the deleted subscription within the
// test's timeout.
func TestPushUnkeyedRunsWithoutTheControlLog(t *testing.T) {
	var logs metrictest.Log
	var ran atomic.Int32
	topic, _ := names()
	e := newPushEnv(t, func(context.Context, *subscriber.Delivery) error { ran.Add(1); return nil },
		subscriber.WithParking("parked-"+topic), subscriber.WithParkingWait(100*time.Millisecond), subscriber.WithLogger(logs.Logger()))
	ctx := testContext(t)
	token, err := e.srv.SignToken(e.srv.PushClaims(pusher, e.endpoint))
	require.NoError(t, err)
	require.Equal(t, http.StatusNoContent, e.post(t, http.MethodPost, token, pushBody(t, e.sub.Name(), "m-1", "k", "x")), "parking is up")

	// The follower, and any subscription of a replay window still
	// closing: the follower is among them. Deleted again until the loss
	// is logged, in case one was being made while the others went.
	_, subID := splitName(e.sub.Name())
	const lost = "keyorder/subscriber: the push endpoint's parking control log is no longer followed; keyed pushes are answered 503 until Close; pushes without a key run"
	require.NoError(t, poll(ctx, func() bool {
		for _, s := range e.srv.Subscriptions() {
			if strings.Contains(s, subID+"-parking-") {
				err := e.client.SubscriptionAdminClient.DeleteSubscription(ctx, &pubsubpb.DeleteSubscriptionRequest{Subscription: s})
				if status.Code(err) != codes.NotFound { // deleted meanwhile by its own process
					require.NoError(t, err)
				}
			}
		}
		return count(logs.Records(t), "ERROR", lost) == 1
	}), "the loss is logged: %v; subscriptions %v", logs.Records(t), e.srv.Subscriptions())

	assert.Equal(t, http.StatusServiceUnavailable, e.post(t, http.MethodPost, token, pushBody(t, e.sub.Name(), "m-2", "k", "y")), "a keyed push")
	assert.Equal(t, int32(1), ran.Load())
	assert.Equal(t, http.StatusNoContent, e.post(t, http.MethodPost, token, pushBody(t, e.sub.Name(), "m-3", "", "z")), "a push without a key")
	assert.Equal(t, int32(2), ran.Load(), "it ran")
}

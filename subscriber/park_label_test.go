package subscriber_test

import (
	"context"
	"maps"
	"strings"
	"sync"
	"testing"

	"cloud.google.com/go/pubsub/v2"
	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/fieldmaskpb"

	"github.com/keyorder/keyorder/internal/harness"
	"github.com/keyorder/keyorder/subscriber"
)

// labels returns the labels of e's subscription, as the service has them.
func (e fakeEnv) labels(t *testing.T) map[string]string {
	t.Helper()
	sub, err := e.client.SubscriptionAdminClient.GetSubscription(testContext(t), &pubsubpb.GetSubscriptionRequest{Subscription: e.sub.Name()})
	require.NoError(t, err)
	return sub.GetLabels()
}

// setLabels replaces the labels of e's subscription, as an operator does
// with gcloud pubsub subscriptions update --update-labels or
// --remove-labels.
func (e fakeEnv) setLabels(t *testing.T, labels map[string]string) {
	t.Helper()
	_, err := e.client.SubscriptionAdminClient.UpdateSubscription(testContext(t), &pubsubpb.UpdateSubscriptionRequest{
		Subscription: &pubsubpb.Subscription{Name: e.sub.Name(), Labels: labels},
		UpdateMask:   &fieldmaskpb.FieldMask{Paths: []string{"labels"}},
	})
	require.NoError(t, err)
}

// TestParkingReplicaRefused: once a process parks a subscription's keys,
// the subscription says so, in its label; a process that would open it
// without parking, or parking to another topic, is refused with
// ErrInvalidConfig and a message that names the fix, before it receives
// anything. One with the same topic, by ID or full name, opens it.
func TestParkingReplicaRefused(t *testing.T) {
	t.Parallel()
	e := newParkEnv(t, nil)
	parkID := e.parkTopic[strings.LastIndex(e.parkTopic, "/")+1:]
	assert.Equal(t, parkID, e.labels(t)[subscriber.LabelParking], "the first process with parking labels the subscription")
	ctx := testContext(t)

	_, err := subscriber.Open(ctx, e.client, e.sub.Name())
	require.ErrorIs(t, err, subscriber.ErrInvalidConfig, "without parking")
	assert.Contains(t, err.Error(), "open it with WithParking")
	assert.Contains(t, err.Error(), parkID)

	_, err = subscriber.Open(ctx, e.client, e.sub.Name(), subscriber.WithParking("elsewhere"))
	require.ErrorIs(t, err, subscriber.ErrInvalidConfig, "with another topic")
	assert.Contains(t, err.Error(), "parks to another topic")
	assert.Contains(t, err.Error(), parkID)

	_, err = subscriber.CreateWithTopic(ctx, e.client, e.sub.Topic(), e.sub.Name())
	require.ErrorIs(t, err, subscriber.ErrInvalidConfig, "CreateWithTopic of the existing subscription, without parking")

	for _, park := range []string{parkID, e.parkTopic} {
		_, err = subscriber.Open(ctx, e.client, e.sub.Name(), subscriber.WithParking(park))
		assert.NoError(t, err, "the same topic, as %s", park)
	}
}

// TestParkingOnAndOff follows the procedure of the package doc, "Turning
// parking on and off", on a subscription that runs without parking:
// parking turns on with the first process that opens it with
// WithParking, after which one without is refused; it turns off once no
// key is parked and the label is removed, after which one without opens
// it again, and other labels are kept throughout.
func TestParkingOnAndOff(t *testing.T) {
	t.Parallel()
	e := newFakeEnv(t, nil)
	e.setLabels(t, map[string]string{"team": "orders"})
	ctx := testContext(t)
	_, err := subscriber.Open(ctx, e.client, e.sub.Name())
	require.NoError(t, err, "no parking yet: a process without it opens the subscription")

	// On: the new version, with parking.
	parking, err := subscriber.Open(ctx, e.client, e.sub.Name(), subscriber.WithParking("parked"))
	require.NoError(t, err)
	assert.Equal(t, map[string]string{"team": "orders", subscriber.LabelParking: "parked"}, e.labels(t))
	_, err = subscriber.Open(ctx, e.client, e.sub.Name())
	require.ErrorIs(t, err, subscriber.ErrInvalidConfig, "parking is on: an old process is refused when it restarts")

	// Off: no key parked, the label removed, then processes without it.
	list, err := parking.Parked(ctx)
	require.NoError(t, err)
	require.Empty(t, list, "no key is parked")
	labels := maps.Clone(e.labels(t))
	delete(labels, subscriber.LabelParking)
	e.setLabels(t, labels)
	s, err := subscriber.Open(ctx, e.client, e.sub.Name())
	require.NoError(t, err, "parking is off")
	assert.Equal(t, map[string]string{"team": "orders"}, e.labels(t))

	stop := start(t, s, func(context.Context, *subscriber.Delivery) error { return nil })
	stop()
}

// TestParkingChosenOnce: two processes, each with its own client, open an
// unlabelled subscription at the same moment, one with WithParking(t1),
// the other with WithParking(t2). Each read finds no label, so a read
// then a write would let both run, splitting a key's parked messages
// over two topics; the choice subscription, which only one create can
// make, picks one instead. In each of 20 rounds exactly one opens it,
// the other gets ErrInvalidConfig, and the label names the winner's
// topic.
func TestParkingChosenOnce(t *testing.T) {
	t.Parallel()
	srv, client := harness.Fake(t)
	clients := [2]*pubsub.Client{client, harness.Client(t, srv.Addr)}
	topics := [2]string{"chosen-1", "chosen-2"}
	ctx := testContext(t)
	for round := range 20 {
		topic, subID := names()
		_, err := subscriber.CreateWithTopic(ctx, client, topic, subID)
		require.NoError(t, err)
		gate := make(chan struct{})
		var errs [2]error
		var wg sync.WaitGroup
		for i := range 2 {
			wg.Go(func() {
				<-gate
				_, errs[i] = subscriber.Open(ctx, clients[i], subID, subscriber.WithParking(topics[i]))
			})
		}
		close(gate)
		wg.Wait()
		label := "?"
		if sub, err := client.SubscriptionAdminClient.GetSubscription(ctx, &pubsubpb.GetSubscriptionRequest{Subscription: path(client, "subscriptions", subID)}); err == nil {
			label = sub.GetLabels()[subscriber.LabelParking]
		}
		switch {
		case errs[0] == nil && errs[1] == nil:
			t.Fatalf("round %d: both opened it, with two topics; the label says %s", round, label)
		case errs[0] != nil && errs[1] != nil:
			t.Fatalf("round %d: neither opened it: %v; %v", round, errs[0], errs[1])
		}
		winner := 0
		if errs[0] != nil {
			winner = 1
		}
		require.ErrorIs(t, errs[1-winner], subscriber.ErrInvalidConfig, "round %d", round)
		assert.Equal(t, topics[winner], label, "round %d", round)
		_, err = subscriber.Open(ctx, client, subID, subscriber.WithParking(topics[winner]))
		require.NoError(t, err, "round %d: the winner's topic opens it", round)
		_, err = subscriber.Open(ctx, client, subID, subscriber.WithParking(topics[1-winner]))
		require.ErrorIs(t, err, subscriber.ErrInvalidConfig, "round %d: the loser's does not", round)
	}
}

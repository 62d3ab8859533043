package subscriber_test

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"

	"cloud.google.com/go/pubsub/v2"
	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/keyorder/keyorder/internal/harness"
	"github.com/keyorder/keyorder/internal/leaktest"
	"github.com/keyorder/keyorder/internal/metrictest"
	"github.com/keyorder/keyorder/subscriber"
)

func TestMain(m *testing.M) {
	// The tests name the servers they use. PUBSUB_EMULATOR_HOST would also
	// tell every Receive that its server redelivers out of order
	// (WithUnorderedRedelivery), and change what the tests of the
	// service's order check.
	_ = os.Unsetenv("PUBSUB_EMULATOR_HOST")
	leaktest.VerifyTestMain(m)
}

func TestCreateWithTopicCreatesWhatIsMissing(t *testing.T) {
	t.Parallel()
	_, client := harness.Pstest(t)
	ctx := testContext(t)
	topic, sub := names()

	s, err := subscriber.CreateWithTopic(ctx, client, topic, sub)
	require.NoError(t, err)
	assert.True(t, s.Ordered())
	assert.Equal(t, path(client, "subscriptions", sub), s.Name())
	assert.Equal(t, path(client, "topics", topic), s.Topic())

	got, err := client.SubscriptionAdminClient.GetSubscription(ctx, &pubsubpb.GetSubscriptionRequest{Subscription: s.Name()})
	require.NoError(t, err)
	assert.True(t, got.EnableMessageOrdering, "created with message ordering")
	assert.Equal(t, s.Topic(), got.Topic)

	// Again: both exist now, and nothing changes.
	again, err := subscriber.CreateWithTopic(ctx, client, topic, sub)
	require.NoError(t, err)
	assert.True(t, again.Ordered())
}

func TestCreateWithTopicKeepsAnExistingSubscription(t *testing.T) {
	t.Parallel()
	_, client := harness.Pstest(t)
	ctx := testContext(t)
	topic, sub := names()
	createDirectly(t, client, &pubsubpb.Subscription{
		Name: path(client, "subscriptions", sub), Topic: path(client, "topics", topic), EnableMessageOrdering: false,
	})

	s, err := subscriber.CreateWithTopic(ctx, client, topic, sub)
	require.NoError(t, err)
	assert.False(t, s.Ordered(), "an existing subscription keeps its own setting")

	got, err := client.SubscriptionAdminClient.GetSubscription(ctx, &pubsubpb.GetSubscriptionRequest{Subscription: s.Name()})
	require.NoError(t, err)
	assert.False(t, got.EnableMessageOrdering, "and it is not changed")
}

func TestCreateWithTopicRejectsAnotherTopic(t *testing.T) {
	t.Parallel()
	_, client := harness.Pstest(t)
	ctx := testContext(t)
	topic, sub := names()
	other, _ := names()
	_, err := subscriber.CreateWithTopic(ctx, client, other, sub)
	require.NoError(t, err)

	_, err = subscriber.CreateWithTopic(ctx, client, topic, sub)
	require.ErrorIs(t, err, subscriber.ErrTopicMismatch)
	assert.Contains(t, err.Error(), other)
}

func TestOpen(t *testing.T) {
	t.Parallel()
	_, client := harness.Pstest(t)
	ctx := testContext(t)
	topic, sub := names()

	_, err := subscriber.Open(ctx, client, sub)
	require.ErrorIs(t, err, subscriber.ErrNotFound)
	assert.Contains(t, err.Error(), sub)

	_, err = subscriber.CreateWithTopic(ctx, client, topic, sub)
	require.NoError(t, err)
	s, err := subscriber.Open(ctx, client, path(client, "subscriptions", sub))
	require.NoError(t, err)
	assert.True(t, s.Ordered())
	assert.Equal(t, path(client, "topics", topic), s.Topic())
}

func TestOptionsAreValidated(t *testing.T) {
	t.Parallel()
	_, client := harness.Pstest(t)
	ctx := testContext(t)
	topic, sub := names()
	for _, opt := range []subscriber.Option{
		subscriber.WithWorkers(0),
		subscriber.WithKeyBacklog(0),
		subscriber.WithMaxAttempts(0),
		subscriber.WithBackoff(0, time.Second),
		subscriber.WithBackoff(2*time.Second, time.Second),
		subscriber.WithDrainTimeout(-1),
		subscriber.WithDedupWindow(-1),
		subscriber.WithRedeliveryWait(0),
		subscriber.WithReceiveSettings(pubsub.ReceiveSettings{ShutdownOptions: &pubsub.ShutdownOptions{}}),
		subscriber.WithMeterProvider(nil),
		subscriber.WithLogger(nil),
		subscriber.WithDeadLetterPolicy("", 5),
		subscriber.WithDeadLetterPolicy("dlq", 4),
		subscriber.WithDeadLetterPolicy("dlq", 101),
		subscriber.WithRetryPolicy(-time.Second, time.Second),
		subscriber.WithRetryPolicy(2*time.Second, time.Second),
		subscriber.WithRetryPolicy(0, 601*time.Second),
		subscriber.WithParking(""),
		subscriber.WithParking("p"),
		subscriber.WithDeadLetterPolicy("goog-dead", 5),
		subscriber.WithTopicRetention(time.Minute),
		subscriber.WithTopicRetention(32 * 24 * time.Hour),
		nil,
	} {
		_, err := subscriber.CreateWithTopic(ctx, client, topic, sub, opt)
		require.ErrorIs(t, err, subscriber.ErrInvalidConfig)
		_, err = subscriber.Open(ctx, client, sub, opt)
		require.ErrorIs(t, err, subscriber.ErrInvalidConfig)
	}
	// Nothing was created by the failed calls.
	_, err := subscriber.Open(ctx, client, sub)
	require.True(t, errors.Is(err, subscriber.ErrNotFound), "%v", err)

	// Nor does Receive take a nil handler.
	s, err := subscriber.CreateWithTopic(ctx, client, topic, sub)
	require.NoError(t, err)
	require.ErrorIs(t, s.Receive(ctx, nil), subscriber.ErrInvalidConfig)
	// Nor a nil Subscription.
	var none *subscriber.Subscription
	require.ErrorIs(t, none.Receive(ctx, func(context.Context, *subscriber.Delivery) error { return nil }), subscriber.ErrInvalidConfig)
	require.ErrorIs(t, none.Release(ctx, "k"), subscriber.ErrInvalidConfig)
	require.ErrorIs(t, none.RequestRelease(ctx, "k"), subscriber.ErrInvalidConfig)
	_, err = none.Parked(ctx)
	require.ErrorIs(t, err, subscriber.ErrInvalidConfig)
}

// TestNamesAreChecked: topic and subscription names that break the
// service's rules are refused with ErrInvalidConfig before any request, by
// CreateWithTopic, Open and Replay, and nothing is created.
func TestNamesAreChecked(t *testing.T) {
	t.Parallel()
	srv, client := harness.Fake(t)
	ctx := testContext(t)
	for _, tc := range []struct{ name, topic, sub string }{
		{"empty topic", "", "sub-ok"},
		{"short topic", "t", "sub-ok"},
		{"topic starting with a digit", "1topic", "sub-ok"},
		{"topic with a space", "my topic", "sub-ok"},
		{"reserved topic", "google-topic", "sub-ok"},
		{"long topic", "t" + strings.Repeat("x", 255), "sub-ok"},
		{"topic of another collection", "projects/p/subscriptions/topic-ok", "sub-ok"},
		{"empty subscription", "topic-ok", ""},
		{"short subscription", "topic-ok", "s"},
		{"subscription with a slash", "topic-ok", "sub/x"},
		{"full name without project", "topic-ok", "projects//subscriptions/sub-ok"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := subscriber.CreateWithTopic(ctx, client, tc.topic, tc.sub)
			require.ErrorIs(t, err, subscriber.ErrInvalidConfig)
			if tc.sub != "sub-ok" {
				_, err = subscriber.Open(ctx, client, tc.sub)
				require.ErrorIs(t, err, subscriber.ErrInvalidConfig)
			}
			if tc.topic != "topic-ok" {
				err = subscriber.Replay(ctx, client, tc.topic, time.Time{}, func(context.Context, *subscriber.Delivery) error { return nil })
				require.ErrorIs(t, err, subscriber.ErrInvalidConfig)
			}
		})
	}
	assert.Empty(t, srv.Subscriptions(), "nothing was created")
	assert.Empty(t, srv.Messages(path(client, "topics", "topic-ok")))
	_, err := client.TopicAdminClient.GetTopic(ctx, &pubsubpb.GetTopicRequest{Topic: path(client, "topics", "topic-ok")})
	assert.Error(t, err, "the topic was not created")
}

// TestTopicRetentionMakesReplayWork: the natural path, a topic made by
// CreateWithTopic and read back by Replay, works once the topic retains
// its messages (WithTopicRetention); without it, Replay says why.
func TestTopicRetentionMakesReplayWork(t *testing.T) {
	t.Parallel()
	_, client := harness.Fake(t)
	ctx := testContext(t)
	h := func(data *[]string) subscriber.Handler {
		return func(_ context.Context, d *subscriber.Delivery) error {
			*data = append(*data, string(d.Data))
			return nil
		}
	}
	quiet := subscriber.WithQuietPeriod(100 * time.Millisecond)

	topic, subID := names()
	s, err := subscriber.CreateWithTopic(ctx, client, topic, subID, subscriber.WithTopicRetention(time.Hour))
	require.NoError(t, err)
	got, err := client.TopicAdminClient.GetTopic(ctx, &pubsubpb.GetTopicRequest{Topic: s.Topic()})
	require.NoError(t, err)
	assert.Equal(t, time.Hour, got.GetMessageRetentionDuration().AsDuration())
	publishRange(t, client, s.Topic(), []string{"k"}, 1, 3, "")
	var data []string
	require.NoError(t, subscriber.Replay(ctx, client, topic, time.Time{}, h(&data), quiet, subscriber.WithWorkers(1)))
	assert.Equal(t, []string{"k/1", "k/2", "k/3"}, data)

	bare, bareSub := names()
	_, err = subscriber.CreateWithTopic(ctx, client, bare, bareSub)
	require.NoError(t, err)
	require.ErrorIs(t, subscriber.Replay(ctx, client, bare, time.Time{}, h(&data), quiet), subscriber.ErrNoRetention)
}

// TestTopicRetentionOfAnExistingTopic: an existing topic keeps its own
// retention, and the difference is logged. It sets the default logger, so
// it does not run in parallel.
func TestTopicRetentionOfAnExistingTopic(t *testing.T) {
	var logs metrictest.Log
	prev := slog.Default()
	slog.SetDefault(logs.Logger())
	t.Cleanup(func() { slog.SetDefault(prev) })
	_, client := harness.Fake(t)
	ctx := testContext(t)
	topic, subID := names()
	_, err := client.TopicAdminClient.CreateTopic(ctx, &pubsubpb.Topic{Name: path(client, "topics", topic)})
	require.NoError(t, err)
	_, err = subscriber.CreateWithTopic(ctx, client, topic, subID, subscriber.WithTopicRetention(2*time.Hour))
	require.NoError(t, err)
	got, err := client.TopicAdminClient.GetTopic(ctx, &pubsubpb.GetTopicRequest{Topic: path(client, "topics", topic)})
	require.NoError(t, err)
	assert.Zero(t, got.GetMessageRetentionDuration().AsDuration(), "the topic keeps its own")
	recs := logs.Records(t)
	require.Len(t, recs, 1, "%v", recs)
	assert.Equal(t, "WARN", recs[0]["level"])
	assert.Contains(t, recs[0]["msg"], "keeps its own message retention")
	assert.Equal(t, path(client, "topics", topic), recs[0]["topic"])
}

// TestNoParkingOrDeadLetteringOntoItsOwnTopic: a subscription that parks
// or dead-letters onto its own topic would receive its failures again as
// new messages, without end. Both are refused with ErrInvalidConfig, by ID
// or full name, before anything is created.
func TestNoParkingOrDeadLetteringOntoItsOwnTopic(t *testing.T) {
	t.Parallel()
	srv, client := harness.Fake(t)
	ctx := testContext(t)
	for _, tc := range []struct {
		name string
		opt  func(topic string) subscriber.Option
	}{
		{"parking", func(topic string) subscriber.Option { return subscriber.WithParking(topic) }},
		{"parking by full name", func(topic string) subscriber.Option { return subscriber.WithParking(path(client, "topics", topic)) }},
		{"dead-lettering", func(topic string) subscriber.Option { return subscriber.WithDeadLetterPolicy(topic, 5) }},
		{"dead-lettering by full name", func(topic string) subscriber.Option {
			return subscriber.WithDeadLetterPolicy(path(client, "topics", topic), 5)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			topic, subID := names()
			_, err := subscriber.CreateWithTopic(ctx, client, topic, subID, tc.opt(topic))
			require.ErrorIs(t, err, subscriber.ErrInvalidConfig)
			_, err = client.TopicAdminClient.GetTopic(ctx, &pubsubpb.GetTopicRequest{Topic: path(client, "topics", topic)})
			assert.Equal(t, codes.NotFound, status.Code(err), "the topic was not created")
			assert.Empty(t, srv.Subscriptions())
		})
	}
	t.Run("Open with parking", func(t *testing.T) {
		topic, subID := names()
		// The topic retains messages, as a parking topic must.
		_, err := client.TopicAdminClient.CreateTopic(ctx, &pubsubpb.Topic{
			Name: path(client, "topics", topic), MessageRetentionDuration: durationpb.New(time.Hour)})
		require.NoError(t, err)
		s, err := subscriber.CreateWithTopic(ctx, client, topic, subID)
		require.NoError(t, err)
		topicsBefore := topicIDs(t, client)
		_, err = subscriber.Open(ctx, client, subID, subscriber.WithParking(topic))
		require.ErrorIs(t, err, subscriber.ErrInvalidConfig)
		assert.Equal(t, topicsBefore, topicIDs(t, client), "no control topic was created")
		_, err = subscriber.Open(ctx, client, s.Name(), subscriber.WithParking(s.Topic()))
		require.ErrorIs(t, err, subscriber.ErrInvalidConfig)
	})
}

// TestEndedContexts: every blocking call of the package, given a ctx that
// has ended, returns an error matching ctx.Err(), wrapped with what it was
// doing, so that the usual shutdown checks hold.
func TestEndedContexts(t *testing.T) {
	t.Parallel()
	e := newParkEnv(t, nil)
	e.publishSeqs(t, "k", 1, 1)
	stop := start(t, e.sub, func(context.Context, *subscriber.Delivery) error { return subscriber.Permanent(errInjected) })
	e.awaitParked(t, "k", 1)
	stop()
	topic := e.topic
	calls := map[string]func(ctx context.Context) error{
		"CreateWithTopic": func(ctx context.Context) error {
			_, err := subscriber.CreateWithTopic(ctx, e.client, "fresh-topic", "fresh-sub")
			return err
		},
		"Open":              func(ctx context.Context) error { _, err := subscriber.Open(ctx, e.client, e.sub.Name()); return err },
		"Parked":            func(ctx context.Context) error { _, err := e.sub.Parked(ctx); return err },
		"Release":           func(ctx context.Context) error { return e.sub.Release(ctx, "k") },
		"RequestRelease":    func(ctx context.Context) error { return e.sub.RequestRelease(ctx, "k") },
		"WithdrawRelease":   func(ctx context.Context) error { return e.sub.WithdrawRelease(ctx, "k") },
		"SetTopicRetention": func(ctx context.Context) error { return subscriber.SetTopicRetention(ctx, e.client, topic, time.Hour) },
		"Replay": func(ctx context.Context) error {
			return subscriber.Replay(ctx, e.client, topic, time.Time{}, func(context.Context, *subscriber.Delivery) error { return nil })
		},
	}
	for name, call := range calls {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			cancelled, cancel := context.WithCancel(context.Background())
			cancel()
			assert.ErrorIs(t, call(cancelled), context.Canceled)
			expired, cancel := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
			defer cancel()
			assert.ErrorIs(t, call(expired), context.DeadlineExceeded)
		})
	}
}

package orderingtest_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/api/iterator"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/fieldmaskpb"
)

func TestTopicAdmin(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	tc := f.client.TopicAdminClient
	for _, id := range []string{"b-topic", "a-topic", "c-topic"} {
		f.createTopic(&pubsubpb.Topic{Name: topicName(id)})
	}

	got, err := tc.GetTopic(f.ctx, &pubsubpb.GetTopicRequest{Topic: topicName("a-topic")})
	require.NoError(t, err)
	assert.Equal(t, topicName("a-topic"), got.Name)

	var names []string
	it := tc.ListTopics(f.ctx, &pubsubpb.ListTopicsRequest{Project: "projects/keyorder-test", PageSize: 2})
	for {
		topic, err := it.Next()
		if err == iterator.Done {
			break
		}
		require.NoError(t, err)
		names = append(names, topic.Name)
	}
	assert.Equal(t, []string{topicName("a-topic"), topicName("b-topic"), topicName("c-topic"), f.topic}, names)

	var subs []string
	sit := tc.ListTopicSubscriptions(f.ctx, &pubsubpb.ListTopicSubscriptionsRequest{Topic: f.topic})
	for {
		s, err := sit.Next()
		if err == iterator.Done {
			break
		}
		require.NoError(t, err)
		subs = append(subs, s)
	}
	assert.Equal(t, []string{f.sub}, subs)

	require.NoError(t, tc.DeleteTopic(f.ctx, &pubsubpb.DeleteTopicRequest{Topic: f.topic}))
	sub, err := f.client.SubscriptionAdminClient.GetSubscription(f.ctx, &pubsubpb.GetSubscriptionRequest{Subscription: f.sub})
	require.NoError(t, err)
	assert.Equal(t, "_deleted-topic_", sub.Topic, "subscriptions outlive their topic")
	assert.Nil(t, f.srv.Messages(f.topic))

	for _, e := range []struct {
		name string
		err  error
		code codes.Code
	}{
		{"create twice", createTopicErr(f, &pubsubpb.Topic{Name: topicName("a-topic")}), codes.AlreadyExists},
		{"bad name", createTopicErr(f, &pubsubpb.Topic{Name: "projects/p/topics/x"}), codes.InvalidArgument},
		{"goog name", createTopicErr(f, &pubsubpb.Topic{Name: topicName("goog-topic")}), codes.InvalidArgument},
		{"retention too short", createTopicErr(f, &pubsubpb.Topic{Name: topicName("short"), MessageRetentionDuration: durationpb.New(time.Minute)}), codes.InvalidArgument},
		{"get deleted", getTopicErr(f, f.topic), codes.NotFound},
		{"delete deleted", tc.DeleteTopic(f.ctx, &pubsubpb.DeleteTopicRequest{Topic: f.topic}), codes.NotFound},
	} {
		t.Run(e.name, func(t *testing.T) { assert.Equal(t, e.code, status.Code(e.err), "%v", e.err) })
	}
}

func createTopicErr(f *fixture, p *pubsubpb.Topic) error {
	_, err := f.client.TopicAdminClient.CreateTopic(f.ctx, p)
	return err
}

func getTopicErr(f *fixture, name string) error {
	_, err := f.client.TopicAdminClient.GetTopic(f.ctx, &pubsubpb.GetTopicRequest{Topic: name})
	return err
}

func TestSubscriptionAdmin(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	sc := f.client.SubscriptionAdminClient

	got, err := sc.GetSubscription(f.ctx, &pubsubpb.GetSubscriptionRequest{Subscription: f.sub})
	require.NoError(t, err)
	assert.True(t, got.EnableMessageOrdering)
	assert.Equal(t, int32(10), got.AckDeadlineSeconds, "the service's default")
	assert.Equal(t, 7*24*time.Hour, got.MessageRetentionDuration.AsDuration(), "the service's default")

	updated, err := sc.UpdateSubscription(f.ctx, &pubsubpb.UpdateSubscriptionRequest{
		Subscription: &pubsubpb.Subscription{Name: f.sub, AckDeadlineSeconds: 30, RetainAckedMessages: true},
		UpdateMask:   &fieldmaskpb.FieldMask{Paths: []string{"ack_deadline_seconds", "retain_acked_messages"}},
	})
	require.NoError(t, err)
	assert.Equal(t, int32(30), updated.AckDeadlineSeconds)
	assert.True(t, updated.RetainAckedMessages)
	assert.True(t, updated.EnableMessageOrdering)

	f.createSubscription(&pubsubpb.Subscription{Name: subName("another"), Topic: f.topic})
	var names []string
	it := sc.ListSubscriptions(f.ctx, &pubsubpb.ListSubscriptionsRequest{Project: "projects/keyorder-test", PageSize: 1})
	for {
		s, err := it.Next()
		if err == iterator.Done {
			break
		}
		require.NoError(t, err)
		names = append(names, s.Name)
	}
	assert.Equal(t, []string{subName("another"), f.sub}, names)

	require.NoError(t, sc.DeleteSubscription(f.ctx, &pubsubpb.DeleteSubscriptionRequest{Subscription: subName("another")}))

	update := func(p *pubsubpb.Subscription, paths ...string) error {
		_, err := sc.UpdateSubscription(f.ctx, &pubsubpb.UpdateSubscriptionRequest{
			Subscription: p, UpdateMask: &fieldmaskpb.FieldMask{Paths: paths},
		})
		return err
	}
	create := func(p *pubsubpb.Subscription) error {
		_, err := sc.CreateSubscription(f.ctx, p)
		return err
	}
	for _, e := range []struct {
		name string
		err  error
		code codes.Code
	}{
		{"ordering is fixed at creation", update(&pubsubpb.Subscription{Name: f.sub}, "enable_message_ordering"), codes.InvalidArgument},
		{"empty mask", update(&pubsubpb.Subscription{Name: f.sub}), codes.InvalidArgument},
		{"ack deadline too long", update(&pubsubpb.Subscription{Name: f.sub, AckDeadlineSeconds: 601}, "ack_deadline_seconds"), codes.InvalidArgument},
		{"create twice", create(&pubsubpb.Subscription{Name: f.sub, Topic: f.topic}), codes.AlreadyExists},
		{"missing topic", create(&pubsubpb.Subscription{Name: subName("sub-x1"), Topic: topicName("nope")}), codes.NotFound},
		{"missing dead-letter topic", create(&pubsubpb.Subscription{Name: subName("sub-x2"), Topic: f.topic,
			DeadLetterPolicy: &pubsubpb.DeadLetterPolicy{DeadLetterTopic: topicName("nope")}}), codes.NotFound},
		{"too few delivery attempts", create(&pubsubpb.Subscription{Name: subName("sub-x3"), Topic: f.topic,
			DeadLetterPolicy: &pubsubpb.DeadLetterPolicy{DeadLetterTopic: f.topic, MaxDeliveryAttempts: 4}}), codes.InvalidArgument},
		{"ack deadline too short", create(&pubsubpb.Subscription{Name: subName("sub-x4"), Topic: f.topic, AckDeadlineSeconds: 5}), codes.InvalidArgument},
		{"filters beyond equality are not modelled", create(&pubsubpb.Subscription{Name: subName("sub-x5"), Topic: f.topic, Filter: "NOT attributes:x"}), codes.Unimplemented},
		{"bad filter", create(&pubsubpb.Subscription{Name: subName("sub-x6"), Topic: f.topic, Filter: "attributes.x = y"}), codes.InvalidArgument},
		{"get deleted", getSubErr(f, subName("another")), codes.NotFound},
		{"snapshots are not modelled", seekSnapshotErr(f), codes.Unimplemented},
	} {
		t.Run(e.name, func(t *testing.T) { assert.Equal(t, e.code, status.Code(e.err), "%v", e.err) })
	}
}

func getSubErr(f *fixture, name string) error {
	_, err := f.client.SubscriptionAdminClient.GetSubscription(f.ctx, &pubsubpb.GetSubscriptionRequest{Subscription: name})
	return err
}

func seekSnapshotErr(f *fixture) error {
	_, err := f.client.SubscriptionAdminClient.Seek(f.ctx, &pubsubpb.SeekRequest{
		Subscription: f.sub, Target: &pubsubpb.SeekRequest_Snapshot{Snapshot: "projects/keyorder-test/snapshots/s"},
	})
	return err
}

// TestSubscriptionLifecycle: the expiration policy and retention are
// validated and reported as the service does, the topic's retention is
// reported on its subscriptions, and ListTopicSubscriptions forgets a
// deleted subscription.
func TestSubscriptionLifecycle(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	sc := f.client.SubscriptionAdminClient
	day := 24 * time.Hour
	kept := topicName("kept")
	f.createTopic(&pubsubpb.Topic{Name: kept, MessageRetentionDuration: durationpb.New(2 * day)})

	for _, tc := range []struct {
		name      string
		sub       *pubsubpb.Subscription
		code      codes.Code
		ttl       *time.Duration // reported; nil: never expires
		retention time.Duration  // reported
		topicKeep time.Duration  // reported topic_message_retention_duration
	}{
		{name: "defaults", sub: &pubsubpb.Subscription{Topic: f.topic},
			ttl: ptr(31 * day), retention: 7 * day},
		{name: "shortest expiry", sub: &pubsubpb.Subscription{Topic: kept,
			MessageRetentionDuration: durationpb.New(10 * time.Minute),
			ExpirationPolicy:         &pubsubpb.ExpirationPolicy{Ttl: durationpb.New(day)}},
			ttl: ptr(day), retention: 10 * time.Minute, topicKeep: 2 * day},
		{name: "never expires", sub: &pubsubpb.Subscription{Topic: f.topic, ExpirationPolicy: &pubsubpb.ExpirationPolicy{}},
			retention: 7 * day},
		{name: "longest retention", sub: &pubsubpb.Subscription{Topic: f.topic,
			MessageRetentionDuration: durationpb.New(31 * day)}, ttl: ptr(31 * day), retention: 31 * day},
		{name: "retention over 31 days", sub: &pubsubpb.Subscription{Topic: f.topic,
			MessageRetentionDuration: durationpb.New(32 * day)}, code: codes.InvalidArgument},
		{name: "ttl under a day", sub: &pubsubpb.Subscription{Topic: f.topic,
			MessageRetentionDuration: durationpb.New(time.Hour),
			ExpirationPolicy:         &pubsubpb.ExpirationPolicy{Ttl: durationpb.New(12 * time.Hour)}}, code: codes.InvalidArgument},
		{name: "ttl under the retention", sub: &pubsubpb.Subscription{Topic: f.topic,
			ExpirationPolicy: &pubsubpb.ExpirationPolicy{Ttl: durationpb.New(day)}}, code: codes.InvalidArgument},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.sub.Name = subName("life-" + strings.ReplaceAll(tc.name, " ", "-"))
			_, err := sc.CreateSubscription(f.ctx, tc.sub)
			require.Equal(t, tc.code, status.Code(err), "%v", err)
			if tc.code != codes.OK {
				return
			}
			got, err := sc.GetSubscription(f.ctx, &pubsubpb.GetSubscriptionRequest{Subscription: tc.sub.Name})
			require.NoError(t, err)
			require.NotNil(t, got.ExpirationPolicy, "the policy is always reported")
			if tc.ttl == nil {
				assert.Nil(t, got.ExpirationPolicy.Ttl)
			} else {
				assert.Equal(t, *tc.ttl, got.ExpirationPolicy.Ttl.AsDuration())
			}
			assert.Equal(t, tc.retention, got.MessageRetentionDuration.AsDuration())
			assert.Equal(t, tc.topicKeep, got.TopicMessageRetentionDuration.AsDuration())
		})
	}

	list := func(topic string) []string {
		var names []string
		it := f.client.TopicAdminClient.ListTopicSubscriptions(f.ctx, &pubsubpb.ListTopicSubscriptionsRequest{Topic: topic})
		for {
			name, err := it.Next()
			if err == iterator.Done {
				return names
			}
			require.NoError(t, err)
			names = append(names, name)
		}
	}
	require.Equal(t, []string{subName("life-shortest-expiry")}, list(kept))
	require.NoError(t, sc.DeleteSubscription(f.ctx, &pubsubpb.DeleteSubscriptionRequest{Subscription: subName("life-shortest-expiry")}))
	assert.Empty(t, list(kept))
	assert.NotContains(t, f.srv.Subscriptions(), subName("life-shortest-expiry"))
	assert.Contains(t, f.srv.Subscriptions(), f.sub)
}

func ptr[T any](v T) *T { return &v }

// TestRetryPolicyValidation: a retry policy keeps to the service's bounds,
// and gets its defaults, 10 s and 600 s, for the backoffs it leaves unset.
func TestRetryPolicyValidation(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	policy := func(lo, hi *time.Duration) *pubsubpb.RetryPolicy {
		rp := &pubsubpb.RetryPolicy{}
		if lo != nil {
			rp.MinimumBackoff = durationpb.New(*lo)
		}
		if hi != nil {
			rp.MaximumBackoff = durationpb.New(*hi)
		}
		return rp
	}
	for i, tc := range []struct {
		name     string
		policy   *pubsubpb.RetryPolicy
		code     codes.Code
		min, max time.Duration // reported
	}{
		{name: "defaults", policy: policy(nil, nil), min: 10 * time.Second, max: 600 * time.Second},
		{name: "zero", policy: policy(ptr(time.Duration(0)), ptr(time.Duration(0)))},
		{name: "small", policy: policy(ptr(10*time.Millisecond), ptr(time.Second)), min: 10 * time.Millisecond, max: time.Second},
		{name: "over 600 s", policy: policy(nil, ptr(601*time.Second)), code: codes.InvalidArgument},
		{name: "negative", policy: policy(ptr(-time.Second), nil), code: codes.InvalidArgument},
		{name: "minimum over maximum", policy: policy(ptr(2*time.Second), ptr(time.Second)), code: codes.InvalidArgument},
		{name: "minimum over the default maximum", policy: policy(ptr(601*time.Second), nil), code: codes.InvalidArgument},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := f.client.SubscriptionAdminClient.CreateSubscription(f.ctx, &pubsubpb.Subscription{
				Name: subName(fmt.Sprint("retry-", i)), Topic: f.topic, RetryPolicy: tc.policy,
			})
			require.Equal(t, tc.code, status.Code(err), "%v", err)
			if tc.code != codes.OK {
				return
			}
			assert.Equal(t, tc.min, got.RetryPolicy.MinimumBackoff.AsDuration())
			assert.Equal(t, tc.max, got.RetryPolicy.MaximumBackoff.AsDuration())
		})
	}
}

package orderingtest_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"cloud.google.com/go/pubsub/v2"
	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// receiveData receives on sub, acks everything and collects the data of
// each message handled, in order; stop with the returned function.
func (f *fixture) receiveData(sub string) (data func() []string, stop func()) {
	var mu sync.Mutex
	var got []string
	stop = f.receive(sub, nil, func(_ context.Context, m *pubsub.Message) {
		mu.Lock()
		got = append(got, string(m.Data))
		mu.Unlock()
		m.Ack()
	})
	return func() []string {
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), got...)
	}, stop
}

func (f *fixture) seek(sub string, t time.Time) {
	f.t.Helper()
	_, err := f.client.SubscriptionAdminClient.Seek(f.ctx, &pubsubpb.SeekRequest{
		Subscription: sub,
		Target:       &pubsubpb.SeekRequest_Time{Time: timestamppb.New(t)},
	})
	require.NoError(f.t, err)
}

// TestSeekBack seeks a subscription that has acknowledged everything back
// in time. Whatever is retained comes again, payload intact; a marker
// published afterwards on the same key shows nothing else will.
func TestSeekBack(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name        string
		retainAcked bool
		topicKeeps  bool
		from        int // seek to just before message from
		want        []string
	}{
		{name: "retained acked messages", retainAcked: true, from: 1, want: []string{"k/1", "k/2", "k/3"}},
		{name: "retained by the topic", topicKeeps: true, from: 1, want: []string{"k/1", "k/2", "k/3"}},
		{name: "to the middle", retainAcked: true, from: 3, want: []string{"k/3"}},
		{name: "nothing retained", from: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t, nil)
			topic := &pubsubpb.Topic{Name: topicName("kept")}
			if tc.topicKeeps {
				topic.MessageRetentionDuration = durationpb.New(time.Hour)
			}
			f.createTopic(topic)
			f.createSubscription(&pubsubpb.Subscription{Name: subName("kept"), Topic: topic.Name,
				EnableMessageOrdering: true, RetainAckedMessages: tc.retainAcked})
			var at time.Time
			for seq := 1; seq <= 3; seq++ {
				if seq == tc.from {
					at = time.Now()
				}
				f.publish(topic.Name, []string{"k"}, seq-1, 1)
			}
			data, _ := f.receiveData(subName("kept"))
			f.waitFor("three acks", func() bool { return f.srv.Stats(subName("kept")).Acked == 3 })

			f.seek(subName("kept"), at)
			f.publish(topic.Name, []string{"k"}, 3, 1)
			want := append([]string{"k/1", "k/2", "k/3"}, append(tc.want, "k/4")...)
			f.waitFor("the marker acked", func() bool { return f.srv.Stats(subName("kept")).Acked == len(want) })
			assert.Equal(t, want, data())
		})
	}
}

// TestSeekIntoThePast seeks a subscription created after the messages were
// published to a time before it existed, as an ordered replay does: only
// topic retention brings them back, payload intact, from that time on.
//
// Without topic retention the Seek still succeeds, as it does on the
// service, and brings nothing from before the subscription existed: the
// service documents that a subscription receives only what is published
// after its creation, and that seeking further back needs the topic's
// message retention.
func TestSeekIntoThePast(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name      string
		retention *durationpb.Duration
		from      int // seek to just before message from
		want      []string
	}{
		{name: "topic retains messages", retention: durationpb.New(10 * time.Minute), from: 1, want: []string{"k/1", "k/2", "k/3"}},
		{name: "from the middle", retention: durationpb.New(10 * time.Minute), from: 2, want: []string{"k/2", "k/3"}},
		{name: "topic retains nothing", from: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t, nil)
			topic := topicName("retained")
			f.createTopic(&pubsubpb.Topic{Name: topic, MessageRetentionDuration: tc.retention})
			var at time.Time
			for seq := 1; seq <= 3; seq++ {
				if seq == tc.from {
					at = time.Now()
				}
				f.publish(topic, []string{"k"}, seq-1, 1)
			}

			late := subName("late")
			f.createSubscription(&pubsubpb.Subscription{Name: late, Topic: topic, EnableMessageOrdering: true})
			f.seek(late, at)
			f.publish(topic, []string{"k"}, 3, 1)
			data, _ := f.receiveData(late)
			want := append(tc.want, "k/4")
			f.waitFor("the marker acked", func() bool { return f.srv.Stats(late).Acked == len(want) })
			assert.Equal(t, want, data())
		})
	}
}

// TestSeekForgetsOutstanding: seeking forward acknowledges what came
// before, including messages still outstanding.
func TestSeekForgetsOutstanding(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	f.publish(f.topic, []string{"k"}, 0, 2)
	res, err := f.client.SubscriptionAdminClient.Pull(f.ctx, &pubsubpb.PullRequest{Subscription: f.sub, MaxMessages: 10})
	require.NoError(t, err)
	require.Len(t, res.ReceivedMessages, 2)
	require.Equal(t, 2, f.srv.Stats(f.sub).Outstanding)

	f.seek(f.sub, time.Now().Add(time.Second))
	assert.Equal(t, 0, f.srv.Stats(f.sub).Outstanding)
	assert.Empty(t, f.pullNow(f.sub, 10))
}

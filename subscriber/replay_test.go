package subscriber_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"cloud.google.com/go/pubsub/v2"
	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/api/iterator"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/keyorder/keyorder/internal/harness"
	"github.com/keyorder/keyorder/ordering"
	"github.com/keyorder/keyorder/ordering/orderingtest"
	"github.com/keyorder/keyorder/subscriber"
)

// replayEnv is a faithful fake with one topic, which retains messages for
// retention (0 for none), and no subscription.
type replayEnv struct {
	srv    *orderingtest.Server
	client *pubsub.Client
	topic  string // full name
}

func newReplayEnv(t *testing.T, retention time.Duration, fopts ...orderingtest.Option) replayEnv {
	t.Helper()
	srv, client := harness.Fake(t, fopts...)
	id, _ := names()
	topic := &pubsubpb.Topic{Name: "projects/" + client.Project() + "/topics/" + id}
	if retention > 0 {
		topic.MessageRetentionDuration = durationpb.New(retention)
	}
	_, err := client.TopicAdminClient.CreateTopic(testContext(t), topic)
	require.NoError(t, err)
	return replayEnv{srv: srv, client: client, topic: topic.Name}
}

// publish sends messages first..last of each key, interleaved, with data
// prefix+"key/i", and waits for them.
func (e replayEnv) publish(t *testing.T, keys []string, first, last int, prefix string) {
	t.Helper()
	publishRange(t, e.client, e.topic, keys, first, last, prefix)
}

// replaySubscriptions lists the subscriptions Replay made that exist now.
func (e replayEnv) replaySubscriptions() []string {
	var subs []string
	for _, s := range e.srv.Subscriptions() {
		if strings.Contains(s, "/subscriptions/keyorder-replay-") {
			subs = append(subs, s)
		}
	}
	return subs
}

// requireNoSubscription checks, on the server and through the admin API,
// that nothing is left on the topic.
func (e replayEnv) requireNoSubscription(t *testing.T) {
	t.Helper()
	assert.Empty(t, e.srv.Subscriptions())
	it := e.client.TopicAdminClient.ListTopicSubscriptions(testContext(t), &pubsubpb.ListTopicSubscriptionsRequest{Topic: e.topic})
	s, err := it.Next()
	require.ErrorIs(t, err, iterator.Done, "subscription %s left on the topic", s)
}

// replay runs Replay in the background and returns a channel for its
// result.
func (e replayEnv) replay(ctx context.Context, from time.Time, h subscriber.Handler, opts ...subscriber.Option) <-chan error {
	done := make(chan error, 1)
	go func() { done <- subscriber.Replay(ctx, e.client, e.topic, from, h, opts...) }()
	return done
}

// TestReplay reads a topic from the middle of its history while messages
// are published, deliveries are duplicated, a key's tail is redelivered
// and the streams break: the handler must see every message published
// between the start point and Replay's call exactly once, in key order,
// and none of the others; Replay must return by itself and leave nothing
// on the topic.
func TestReplay(t *testing.T) {
	t.Parallel()
	keys := keyNames(6)
	const perKey = 30
	e := newReplayEnv(t, 24*time.Hour)
	e.publish(t, keys, 1, 5, "old:")
	from := time.Now()
	e.publish(t, keys, 1, perKey, "")
	dup := e.srv.DuplicateDeliveries(orderingtest.AnyMessage, 40)

	var (
		wrong   []string // messages outside the range that reached h
		wrongMu sync.Mutex
		once    sync.Once
		during  sync.WaitGroup
	)
	tr := newTracker(keys, perKey)
	track := tr.handler(func(ctx context.Context, d *subscriber.Delivery) error {
		if string(d.Data) != "key-0/10" {
			return nil
		}
		once.Do(func() {
			subs := e.replaySubscriptions()
			if !assert.Len(t, subs, 1) {
				return
			}
			n, err := e.srv.RedeliverKey(subs[0], "key-0")
			assert.NoError(t, err)
			assert.Positive(t, n, "key-0's tail is redelivered")
			assert.Positive(t, e.srv.BreakStreams(subs[0]))
			during.Add(1)
			go func() {
				defer during.Done()
				e.publish(t, keys, 1, 5, "new:") // after Replay started: not handed over
			}()
		})
		return nil
	})
	h := func(ctx context.Context, d *subscriber.Delivery) error {
		if s := string(d.Data); strings.HasPrefix(s, "old:") || strings.HasPrefix(s, "new:") {
			wrongMu.Lock()
			defer wrongMu.Unlock()
			wrong = append(wrong, s)
			return nil
		}
		return track(ctx, d)
	}
	rs := pubsub.DefaultReceiveSettings
	rs.MaxOutstandingMessages = 20 // the backlog comes bit by bit, so faults land mid-stream
	err := await(t, e.replay(testContext(t), from, h, subscriber.WithWorkers(3),
		subscriber.WithReceiveSettings(rs), subscriber.WithQuietPeriod(time.Second)))
	require.NoError(t, err)
	during.Wait()

	select {
	case <-tr.done:
	default:
		t.Error("Replay returned before every message was processed")
	}
	tr.verify(t)
	wrongMu.Lock()
	assert.Empty(t, wrong, "messages outside [from, start) reached the handler")
	wrongMu.Unlock()
	assert.Positive(t, dup.Hits(), "deliveries were duplicated")
	assert.Len(t, e.srv.Messages(e.topic), len(keys)*(5+perKey+5))
	e.requireNoSubscription(t)
}

// TestReplayFromZero checks that a zero start reads every message the
// topic retains.
func TestReplayFromZero(t *testing.T) {
	t.Parallel()
	keys := keyNames(3)
	e := newReplayEnv(t, time.Hour)
	e.publish(t, keys, 1, 10, "")
	tr := newTracker(keys, 10)
	err := await(t, e.replay(testContext(t), time.Time{}, tr.handler(func(context.Context, *subscriber.Delivery) error { return nil }),
		subscriber.WithQuietPeriod(200*time.Millisecond)))
	require.NoError(t, err)
	tr.verify(t)
	e.requireNoSubscription(t)
}

// TestReplayEmpty checks that a replay of a range with no message returns
// after the quiet period.
func TestReplayEmpty(t *testing.T) {
	t.Parallel()
	e := newReplayEnv(t, time.Hour)
	e.publish(t, keyNames(2), 1, 3, "old:")
	var calls atomic.Int32
	err := await(t, e.replay(testContext(t), time.Now(), func(context.Context, *subscriber.Delivery) error {
		calls.Add(1)
		return nil
	}, subscriber.WithQuietPeriod(100*time.Millisecond)))
	require.NoError(t, err)
	assert.Zero(t, calls.Load())
	e.requireNoSubscription(t)
}

// TestReplayRetention checks the typed errors for a topic that cannot
// serve the replay, and that nothing is created for it.
func TestReplayRetention(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name      string
		retention time.Duration
		from      time.Time
		want      error
	}{
		{"no retention", 0, time.Now().Add(-time.Minute), subscriber.ErrNoRetention},
		{"no retention, from the start", 0, time.Time{}, subscriber.ErrNoRetention},
		{"before the retention", time.Hour, time.Now().Add(-2 * time.Hour), subscriber.ErrBeforeRetention},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newReplayEnv(t, tc.retention)
			e.publish(t, keyNames(2), 1, 3, "")
			err := subscriber.Replay(testContext(t), e.client, e.topic, tc.from, func(context.Context, *subscriber.Delivery) error {
				t.Error("handler called")
				return nil
			})
			require.ErrorIs(t, err, tc.want)
			assert.Contains(t, err.Error(), e.topic)
			e.requireNoSubscription(t)
		})
	}
}

func TestReplayInvalid(t *testing.T) {
	t.Parallel()
	e := newReplayEnv(t, time.Hour)
	ctx := testContext(t)
	h := func(context.Context, *subscriber.Delivery) error { return nil }
	for name, err := range map[string]error{
		"nil client":     subscriber.Replay(ctx, nil, e.topic, time.Time{}, h),
		"nil handler":    subscriber.Replay(ctx, e.client, e.topic, time.Time{}, nil),
		"future start":   subscriber.Replay(ctx, e.client, e.topic, time.Now().Add(time.Hour), h),
		"quiet period 0": subscriber.Replay(ctx, e.client, e.topic, time.Time{}, h, subscriber.WithQuietPeriod(0)),
	} {
		assert.ErrorIs(t, err, subscriber.ErrInvalidConfig, name)
	}
	err := subscriber.Replay(ctx, e.client, "no-such-topic", time.Time{}, h)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "no-such-topic")
	e.requireNoSubscription(t)
}

// TestReplayHandlerFails checks that the handler's first failure stops
// Replay, which returns it naming the message, calls the handler no more,
// and deletes its subscription.
func TestReplayHandlerFails(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		fail func() error
		is   func(error) bool
	}{
		{"error", func() error { return errInjected }, func(err error) bool { return errors.Is(err, errInjected) }},
		{"panic", func() error { panic("injected") }, func(err error) bool { return errors.As(err, new(*subscriber.PanicError)) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			keys := keyNames(4)
			e := newReplayEnv(t, time.Hour)
			e.publish(t, keys, 1, 10, "")
			var (
				failed atomic.Bool
				after  atomic.Int32
			)
			err := await(t, e.replay(testContext(t), time.Time{}, func(_ context.Context, d *subscriber.Delivery) error {
				if failed.Load() {
					after.Add(1)
				}
				if string(d.Data) == "key-1/5" {
					failed.Store(true)
					return tc.fail()
				}
				return nil
			}, subscriber.WithWorkers(1))) // one call at a time: none may start after the failure
			var re *subscriber.ReplayError
			require.ErrorAs(t, err, &re)
			assert.True(t, tc.is(err), "%v", err)
			assert.Equal(t, "key-1", re.Key)
			var want orderingtest.Message
			for _, m := range e.srv.Messages(e.topic) {
				if string(m.Data) == "key-1/5" {
					want = m
				}
			}
			assert.Equal(t, want.ID, re.MessageID)
			assert.True(t, want.PublishTime.Equal(re.PublishTime))
			assert.Contains(t, err.Error(), want.ID)
			assert.Zero(t, after.Load(), "the handler was called after it failed")
			e.requireNoSubscription(t)
		})
	}
}

// TestReplayWaitsForRunningHandler checks the caught-up rule's first half:
// a handler that runs longer than the quiet period keeps Replay going, and
// so does what its key sends after it.
func TestReplayWaitsForRunningHandler(t *testing.T) {
	t.Parallel()
	const quiet = 100 * time.Millisecond
	e := newReplayEnv(t, time.Hour)
	e.publish(t, []string{"k"}, 1, 3, "")
	var (
		started = make(chan struct{})
		release = make(chan struct{})
		mu      sync.Mutex
		got     []string
	)
	done := e.replay(testContext(t), time.Time{}, func(_ context.Context, d *subscriber.Delivery) error {
		if string(d.Data) == "k/2" {
			close(started)
			<-release
		}
		mu.Lock()
		defer mu.Unlock()
		got = append(got, string(d.Data))
		return nil
	}, subscriber.WithQuietPeriod(quiet))
	<-started
	select {
	case err := <-done:
		t.Fatalf("Replay returned while a handler ran: %v", err)
	case <-time.After(5 * quiet):
	}
	close(release)
	require.NoError(t, await(t, done))
	mu.Lock()
	defer mu.Unlock()
	assert.Equal(t, []string{"k/1", "k/2", "k/3"}, got)
	e.requireNoSubscription(t)
}

// TestReplayCancelled checks that Replay returns ctx's error when ctx
// ends, and deletes its subscription all the same.
func TestReplayCancelled(t *testing.T) {
	t.Parallel()
	e := newReplayEnv(t, time.Hour)
	e.publish(t, keyNames(2), 1, 5, "")
	ctx, cancel := context.WithCancel(testContext(t))
	defer cancel()
	started := make(chan struct{})
	var once sync.Once
	done := e.replay(ctx, time.Time{}, func(hctx context.Context, d *subscriber.Delivery) error {
		once.Do(func() { close(started) })
		<-hctx.Done() // cancelled after the drain timeout
		return hctx.Err()
	}, subscriber.WithDrainTimeout(10*time.Millisecond))
	<-started
	cancel()
	require.ErrorIs(t, await(t, done), context.Canceled)
	e.requireNoSubscription(t)
}

// TestReplayGap checks that a gap in a producer's sequence found during a
// replay goes to the same callback as in Receive, and that the first
// stamp of the range starts the sequence.
func TestReplayGap(t *testing.T) {
	t.Parallel()
	e := newReplayEnv(t, time.Hour)
	msg := func(seq uint64) stamped {
		return stamped{key: "acct", data: fmt.Sprintf("acct/%d", seq), stamp: ordering.Stamp{Producer: "p-1", Seq: seq}}
	}
	for _, err := range publishStamped(t, e.client, e.topic, []stamped{msg(1), msg(2)}) {
		require.NoError(t, err)
	}
	from := time.Now()
	for _, err := range publishStamped(t, e.client, e.topic, []stamped{msg(4), msg(5), msg(8), msg(9)}) {
		require.NoError(t, err)
	}
	var (
		mu   sync.Mutex
		gaps []subscriber.Gap
		seqs []uint64
	)
	err := await(t, e.replay(testContext(t), from, func(_ context.Context, d *subscriber.Delivery) error {
		mu.Lock()
		defer mu.Unlock()
		seqs = append(seqs, d.Seq)
		return nil
	}, subscriber.WithQuietPeriod(200*time.Millisecond), subscriber.WithGapHandler(func(g subscriber.Gap) {
		mu.Lock()
		defer mu.Unlock()
		gaps = append(gaps, g)
	})))
	require.NoError(t, err)
	mu.Lock()
	defer mu.Unlock()
	assert.Equal(t, []uint64{4, 5, 8, 9}, seqs)
	require.Len(t, gaps, 1, "%+v", gaps)
	assert.Equal(t, "acct", gaps[0].Key)
	assert.Equal(t, "p-1", gaps[0].Producer)
	assert.Equal(t, [2]uint64{6, 7}, [2]uint64{gaps[0].From, gaps[0].To})
	e.requireNoSubscription(t)
}

// TestReplayDoesNotPark: Replay takes Receive's options, but its failure
// policy is its own: the first failure stops it. WithParking does not
// apply: no control topic is made, and nothing is copied to the parking
// topic.
func TestReplayDoesNotPark(t *testing.T) {
	t.Parallel()
	e := newReplayEnv(t, time.Hour)
	e.publish(t, keyNames(2), 1, 3, "")
	before := topicIDs(t, e.client)
	err := await(t, e.replay(testContext(t), time.Time{}, func(_ context.Context, d *subscriber.Delivery) error {
		if string(d.Data) == "key-1/2" {
			return subscriber.Permanent(errInjected)
		}
		return nil
	}, subscriber.WithParking("parked"), subscriber.WithParkingWait(testParkingWait), subscriber.WithMaxAttempts(1), fast))
	var re *subscriber.ReplayError
	require.ErrorAs(t, err, &re)
	assert.Equal(t, "key-1", re.Key)
	assert.Equal(t, before, topicIDs(t, e.client), "Replay made no topic")
	e.requireNoSubscription(t)
}

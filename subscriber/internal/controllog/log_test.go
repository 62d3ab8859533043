package controllog

import (
	"context"
	"strings"
	"testing"
	"time"

	"cloud.google.com/go/pubsub/v2"
	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/keyorder/keyorder/internal/harness"
	"github.com/keyorder/keyorder/internal/leaktest"
	"github.com/keyorder/keyorder/ordering/orderingtest"
)

func TestMain(m *testing.M) { leaktest.VerifyTestMain(m) }

// retention is the control topic's in these tests: the service's longest.
const retention = 31 * 24 * time.Hour

// fake starts a fake server for the test and creates on it the control
// topic of a subscription, and returns the server, a client, and a Config
// for the subscription's log. The subscription itself need not exist: the
// log only names things after it.
func fake(t *testing.T) (*orderingtest.Server, *pubsub.Client, Config) {
	t.Helper()
	srv, client := harness.Fake(t)
	sub := "projects/" + harness.Project + "/subscriptions/orders"
	_, err := client.TopicAdminClient.CreateTopic(testContext(t), &pubsubpb.Topic{Name: Topic(sub), MessageRetentionDuration: durationpb.New(retention)})
	require.NoError(t, err)
	return srv, client, Config{Subscription: sub, Retention: retention, Lease: testLease, Drain: time.Second}
}

// open opens a Log for the length of the test.
func open(t *testing.T, client *pubsub.Client, cfg Config) *Log {
	t.Helper()
	l, err := Open(testContext(t), client, cfg)
	require.NoError(t, err)
	t.Cleanup(func() { _ = l.Close() })
	return l
}

func testContext(t *testing.T) context.Context { return harness.Context(t, 30*time.Second) }

// TestTwoLogsAgree: two processes' Logs race to park a key; the log's
// order makes one the winner, and both see the same state, verdicts and
// views.
func TestTwoLogsAgree(t *testing.T) {
	t.Parallel()
	srv, client, cfg := fake(t)
	a, b := open(t, client, cfg), open(t, client, cfg)
	ctx := testContext(t)
	require.NotEqual(t, a.ID(), b.ID())

	va, err := a.Record(ctx, Event{Kind: Park, Key: "k", Msg: "m1", Err: "boom"})
	require.NoError(t, err)
	require.True(t, va.Applied, "the first park wins")
	require.NotEmpty(t, va.ParkID)
	vb, err := b.Record(ctx, Event{Kind: Park, Key: "k", Msg: "m9"})
	require.NoError(t, err)
	assert.False(t, vb.Applied, "the second is refused")
	assert.Equal(t, va.ParkID, vb.ParkID, "and learns the park in force")

	v, err := b.Record(ctx, Event{Kind: Forward, Key: "k", ParkID: va.ParkID, IDs: []string{"m1", "m2"}})
	require.NoError(t, err)
	assert.True(t, v.Applied)
	require.NoError(t, a.Sync(ctx))
	for _, l := range []*Log{a, b} {
		assert.Equal(t, va.ParkID, l.View().ParkID("k"))
		assert.Empty(t, l.View().ParkID("other"))
		rec := l.Lookup("k")
		require.NotNil(t, rec)
		assert.Equal(t, []string{"m1", "m2"}, rec.IDs)
		assert.Equal(t, "boom", rec.Err)
		assert.Equal(t, 2, rec.Remaining())
		list := l.List()
		require.Len(t, list, 1)
		assert.Equal(t, Summary{Key: "k", Since: rec.Since, Messages: 2, MessageID: "m1", LastError: "boom"}, list[0])
	}

	// A release by b: its claim, its progress, published without a
	// verdict, and the unpark.
	v, err = b.Record(ctx, Event{Kind: Claim, Key: "k", ParkID: va.ParkID})
	require.NoError(t, err)
	require.True(t, v.Applied)
	assert.Equal(t, b.ID(), b.Lookup("k").Owner)
	require.NoError(t, b.Publish(ctx, Event{Kind: Progress, Key: "k", ParkID: va.ParkID, IDs: []string{"m1", "m2"}}))
	v, err = a.Record(ctx, Event{Kind: Unpark, Key: "k", ParkID: va.ParkID, N: 2})
	require.NoError(t, err)
	assert.False(t, v.Applied, "only the releaser unparks")
	assert.True(t, a.Lookup("k").IsReleased("m1"), "a's verdict came after b's progress")
	v, err = b.Record(ctx, Event{Kind: Unpark, Key: "k", ParkID: va.ParkID, N: 2})
	require.NoError(t, err)
	assert.True(t, v.Applied)
	assert.True(t, v.Ended)
	require.NoError(t, a.Sync(ctx))
	for _, l := range []*Log{a, b} {
		assert.Empty(t, l.View().ParkID("k"))
		assert.True(t, l.View().Released("m1"), "released messages are remembered")
		assert.False(t, l.View().Released("m3"))
		assert.Nil(t, l.Lookup("k"))
		assert.Empty(t, l.List())
	}

	// The wire: one ordering key; state events marked as such, markers
	// addressed to their Log.
	msgs := srv.Messages(Topic(cfg.Subscription))
	require.NotEmpty(t, msgs)
	markers := 0
	for _, m := range msgs {
		assert.Equal(t, "keyorder-control", m.OrderingKey)
		if strings.Contains(string(m.Data), `"kind":"marker"`) {
			markers++
			assert.Len(t, m.Attributes, 1)
			assert.Contains(t, []string{a.ID(), b.ID()}, m.Attributes["keyorder-to"])
		} else {
			assert.Equal(t, map[string]string{"keyorder-state": "1"}, m.Attributes)
		}
	}
	assert.Positive(t, markers)
}

// TestChanges: a writer waiting on Changes is woken by the next event
// applied, another Log's included.
func TestChanges(t *testing.T) {
	t.Parallel()
	_, client, cfg := fake(t)
	a, b := open(t, client, cfg), open(t, client, cfg)
	ctx := testContext(t)
	changed := b.Changes()
	select {
	case <-changed:
		t.Fatal("changed before any event")
	default:
	}
	_, err := a.Record(ctx, Event{Kind: Park, Key: "k"})
	require.NoError(t, err)
	select {
	case <-changed:
	case <-ctx.Done():
		t.Fatal("b never saw a's park")
	}
	assert.NotEmpty(t, b.View().ParkID("k"))
}

// TestReleaseRequests: a Log that only asks records a release request on a
// park; every Log lists it as pending, with who asked, until a release of
// the park fails for good, which ends it.
func TestReleaseRequests(t *testing.T) {
	t.Parallel()
	_, client, cfg := fake(t)
	a, asker := open(t, client, cfg), open(t, client, cfg)
	ctx := testContext(t)
	pv, err := a.Record(ctx, Event{Kind: Park, Key: "k"})
	require.NoError(t, err)
	assert.Empty(t, a.PendingReleases())

	v, err := asker.Record(ctx, Event{Kind: Request, Key: "k", ParkID: pv.ParkID, From: "ops"})
	require.NoError(t, err)
	require.True(t, v.Applied)
	require.NoError(t, a.Sync(ctx))
	for _, l := range []*Log{a, asker} {
		got := l.PendingReleases()
		require.Len(t, got, 1)
		assert.Equal(t, "k", got[0].Key)
		assert.Equal(t, pv.ParkID, got[0].ParkID)
		assert.Equal(t, "ops", got[0].Requester)
		assert.Equal(t, got[0].Requested, l.Lookup("k").Requested)
		assert.False(t, got[0].Requested.IsZero())
	}

	v, err = a.Record(ctx, Event{Kind: Claim, Key: "k", ParkID: pv.ParkID})
	require.NoError(t, err)
	require.True(t, v.Applied)
	require.Equal(t, a.ID(), a.PendingReleases()[0].Owner)
	require.NoError(t, a.Publish(ctx, Event{Kind: Stop, Key: "k", ParkID: pv.ParkID, Msg: "m1", Err: "again"}))
	require.NoError(t, asker.Sync(ctx))
	assert.Empty(t, asker.PendingReleases())
	assert.Equal(t, "again", asker.Lookup("k").Err)
}

// TestGoneWithoutTheFollower: a Log whose follower's subscription is
// deleted can no longer tell the state, so it says so: Gone is closed,
// Err says why, and a writer waiting for a verdict gets an error rather
// than waiting in vain.
func TestGoneWithoutTheFollower(t *testing.T) {
	t.Parallel()
	srv, client, cfg := fake(t)
	l := open(t, client, cfg)
	ctx := testContext(t)
	assert.NoError(t, l.Err(), "nothing wrong yet")
	var follower string
	for _, s := range srv.Subscriptions() {
		if strings.Contains(s, "-parking-"+l.ID()+"-") {
			follower = s
		}
	}
	require.NotEmpty(t, follower)
	require.NoError(t, client.SubscriptionAdminClient.DeleteSubscription(ctx, &pubsubpb.DeleteSubscriptionRequest{Subscription: follower}))
	select {
	case <-l.Gone():
	case <-ctx.Done():
		t.Fatal("the Log went on without its follower")
	}
	require.Error(t, l.Err())
	_, err := l.Record(ctx, Event{Kind: Park, Key: "k"})
	require.Error(t, err)
	require.NoError(t, ctx.Err(), "the writer did not wait for its ctx")
}

// TestOpenReplaysTheLog: a Log opened later has the state the earlier
// ones made, and a Log that closes says so and deletes its follower's
// subscription.
func TestOpenReplaysTheLog(t *testing.T) {
	t.Parallel()
	srv, client, cfg := fake(t)
	ctx := testContext(t)
	a, err := Open(ctx, client, cfg)
	require.NoError(t, err)
	v, err := a.Record(ctx, Event{Kind: Park, Key: "k", Msg: "m1", Err: "boom"})
	require.NoError(t, err)
	_, err = a.Record(ctx, Event{Kind: Forward, Key: "k", ParkID: v.ParkID, IDs: []string{"m1"}})
	require.NoError(t, err)
	require.NoError(t, a.Close())
	select {
	case <-a.Gone():
	default:
		t.Fatal("Gone is not closed once the Log is")
	}
	assert.Error(t, a.Err())
	for _, s := range srv.Subscriptions() {
		assert.NotContains(t, s, "-parking-"+a.ID(), "left behind")
	}

	b := open(t, client, cfg)
	rec := b.Lookup("k")
	require.NotNil(t, rec)
	assert.Equal(t, v.ParkID, rec.ParkID)
	assert.Equal(t, []string{"m1"}, rec.IDs)
}

// TestOpenNeedsALease: the lease is a rule of the log, which a Log cannot
// guess.
func TestOpenNeedsALease(t *testing.T) {
	t.Parallel()
	_, client, cfg := fake(t)
	cfg.Lease = 0
	_, err := Open(testContext(t), client, cfg)
	require.Error(t, err)
}

// TestSnapshotsKeepTheState: Logs with Snapshots republish the state as
// snapshots, so a Log opened later finds it in the last few snapshot
// periods of the log and need not read further back. Here the park's own
// events are older than the first window a new Log reads, so only the
// snapshot can tell it about the park. Not parallel: it shortens the
// snapshot period, which every Log of the package reads.
func TestSnapshotsKeepTheState(t *testing.T) {
	old := snapshotEvery
	snapshotEvery = 700 * time.Millisecond
	defer func() { snapshotEvery = old }()

	srv, client, cfg := fake(t)
	ctx := testContext(t)
	writer := cfg
	writer.Snapshots = true
	a := open(t, client, writer)
	v, err := a.Record(ctx, Event{Kind: Park, Key: "k", Msg: "k/2", Err: "boom"})
	require.NoError(t, err)
	_, err = a.Record(ctx, Event{Kind: Forward, Key: "k", ParkID: v.ParkID, IDs: []string{"k/2", "k/3"}})
	require.NoError(t, err)

	control := Topic(cfg.Subscription)
	var parkedAt time.Time
	for _, m := range srv.Messages(control) {
		if strings.Contains(string(m.Data), `"kind":"forward"`) {
			parkedAt = m.PublishTime
		}
	}
	require.False(t, parkedAt.IsZero())
	// Wait until the park is older than a new Log's first window, and a
	// snapshot newer.
	window := 3 * snapshotEvery
	require.NoError(t, srv.WaitFor(ctx, func() bool {
		if time.Since(parkedAt) < window+100*time.Millisecond {
			return false
		}
		msgs := srv.Messages(control)
		for i := len(msgs) - 1; i >= 0; i-- {
			if strings.Contains(string(msgs[i].Data), `"last":true`) {
				return time.Since(msgs[i].PublishTime) < snapshotEvery
			}
		}
		return false
	}))
	require.NoError(t, a.Close())

	b := open(t, client, cfg)
	list := b.List()
	require.Len(t, list, 1)
	assert.Equal(t, "k", list[0].Key)
	assert.Equal(t, 2, list[0].Messages)
	assert.Equal(t, 1, b.f.follows, "the first window held a snapshot")
}

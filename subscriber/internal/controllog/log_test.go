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
)

func TestMain(m *testing.M) { leaktest.VerifyTestMain(m) }

// retention is the control topic's in these tests: the service's longest.
const retention = 31 * 24 * time.Hour

// newTopic creates the control topic of a subscription on the server
// client talks to, a fake of the test's own, and returns a Config for
// it. The subscription itself need not exist: the log only names things
// after it.
func newTopic(t *testing.T, client *pubsub.Client) Config {
	t.Helper()
	sub := "projects/" + harness.Project + "/subscriptions/orders"
	_, err := client.TopicAdminClient.CreateTopic(testContext(t), &pubsubpb.Topic{Name: Topic(sub), MessageRetentionDuration: durationpb.New(retention)})
	require.NoError(t, err)
	return Config{Subscription: sub, Retention: retention, Lease: testLease, Drain: time.Second}
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

	srv, client := harness.Fake(t)
	cfg := newTopic(t, client)
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

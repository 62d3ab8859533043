package main

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/keyorder/keyorder/internal/harness"
	"github.com/keyorder/keyorder/ordering/orderingtest"
	"github.com/keyorder/keyorder/publisher"
	"github.com/keyorder/keyorder/subscriber"
)

// evilKey is a key that, printed raw, would erase the operator's line and
// start a forged table row.
const evilKey = "acct-\x1b[2K\r\tforged\nrow"

// parkedNoService parks acct-1 and evilKey with a service that then
// stops, so that no Receive runs while parkctl works, and returns the
// server and the context.
func parkedNoService(t *testing.T) (*orderingtest.Server, context.Context) {
	t.Helper()
	srv, client, sub, ctx := service(t, subscriber.WithMaxAttempts(1), subscriber.WithBackoff(time.Millisecond, 10*time.Millisecond),
		subscriber.WithTopicRetention(time.Hour))
	p, err := publisher.New(client, "ledger")
	require.NoError(t, err)
	for _, key := range []string{"acct-1", evilKey} {
		_, err := p.Publish(ctx, &publisher.Message{Data: []byte("bad \x1b]0;owned\a amount")}, publisher.WithOrderingKey(key)).Get(ctx)
		require.NoError(t, err)
	}
	require.NoError(t, p.Close(ctx))
	rctx, stop := context.WithCancel(ctx)
	received := make(chan error, 1)
	go func() {
		received <- sub.Receive(rctx, func(context.Context, *subscriber.Delivery) error {
			return subscriber.Permanent(errors.New("unreadable\x1b[31m amount"))
		})
	}()
	require.NoError(t, srv.WaitFor(ctx, func() bool {
		list, err := sub.Parked(ctx)
		return err == nil && len(list) == 2
	}), "the keys were not parked")
	stop()
	require.NoError(t, <-received)
	return srv, ctx
}

// TestParkctlWithoutService: no service receives the subscription. list
// prints every key, message ID and error inert, as a table and as JSON;
// release says, while it waits, that the request is recorded and nobody
// has claimed it, and for how long, then that it stays recorded; withdraw
// withdraws it; flags go anywhere.
func TestParkctlWithoutService(t *testing.T) {
	defer func(p, s time.Duration) { progressEvery, stillEvery = p, s }(progressEvery, stillEvery)
	progressEvery, stillEvery = 20*time.Millisecond, 200*time.Millisecond
	_, ctx := parkedNoService(t)

	code, out, errOut := parkctl(ctx, "list", "-sub", "ledger-balances", "-parking", "ledger-parked")
	require.Equal(t, exitOK, code, errOut)
	assert.NotContains(t, out, "\x1b", "no escape reaches the terminal")
	assert.NotContains(t, out, "\r")
	rows := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	require.Len(t, rows, 3, "a header and one row per key, none forged: %q", out)
	assert.Contains(t, out, `"acct-\x1b[2K\r\tforged\nrow"`)
	assert.Contains(t, out, `"permanent: unreadable\x1b[31m amount"`)

	code, out, errOut = parkctl(ctx, "-parking", "ledger-parked", "list", "-json", "-sub", "ledger-balances")
	require.Equal(t, exitOK, code, errOut)
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	require.Len(t, lines, 2, out)
	var keys []listed
	for _, l := range lines {
		var k listed
		dec := json.NewDecoder(strings.NewReader(l))
		dec.DisallowUnknownFields()
		require.NoError(t, dec.Decode(&k), l)
		keys = append(keys, k)
	}
	assert.ElementsMatch(t, []string{"acct-1", evilKey}, []string{keys[0].Key, keys[1].Key})
	assert.Equal(t, 1, keys[0].Messages)
	assert.Nil(t, keys[0].ReleaseRequested)
	assert.NotContains(t, out, "\x1b")

	start := time.Now()
	code, out, errOut = parkctl(ctx, "release", "acct-1", "-sub", "ledger-balances", "-parking", "ledger-parked", "-timeout", "1s")
	assert.Equal(t, exitFail, code)
	assert.Empty(t, out)
	assert.Less(t, time.Since(start), 10*time.Second)
	assert.Contains(t, errOut, `asking for the release of "acct-1"`)
	// The hint joins the line once stillEvery has passed, which a slow
	// first look may pass already (a CI run had it on every line).
	assert.Regexp(t, `request recorded by parkctl\S* on \S+ \(pid \d+\); waiting for a Receive of \S+ to claim it(; is a service receiving it running\?)? \(\d+s so far\)`, errOut)
	assert.Contains(t, errOut, "is a service receiving it running?")
	assert.Contains(t, errOut, "not carried out within -timeout 1s; the request stays recorded")

	code, out, errOut = parkctl(ctx, "list", "-json", "-sub", "ledger-balances", "-parking", "ledger-parked")
	require.Equal(t, exitOK, code, errOut)
	assert.Contains(t, out, `"release_requested":`)

	code, out, errOut = parkctl(ctx, "withdraw", "-sub", "ledger-balances", "-parking", "ledger-parked", "acct-1")
	require.Equal(t, exitOK, code, errOut)
	assert.Equal(t, "withdrew the release request on \"acct-1\": it stays parked\n", out)
	code, out, _ = parkctl(ctx, "list", "-json", "-sub", "ledger-balances", "-parking", "ledger-parked")
	require.Equal(t, exitOK, code)
	assert.NotContains(t, out, `"release_requested":`)
	code, _, errOut = parkctl(ctx, "withdraw", "-sub", "ledger-balances", "-parking", "ledger-parked", "acct-1")
	assert.Equal(t, exitFail, code)
	assert.Contains(t, errOut, "no release request is pending")

	code, out, errOut = parkctl(ctx, "release", "-wait=false", "-sub", "ledger-balances", "-parking", "ledger-parked", "--", evilKey)
	require.Equal(t, exitOK, code, errOut)
	assert.Contains(t, out, `release of "acct-\x1b[2K\r\tforged\nrow" requested`)
	assert.NotContains(t, out, "\x1b")
}

// brokenPipe is the stdout of parkctl replay | head -1: it takes one line,
// then fails as a closed pipe does.
type brokenPipe struct {
	mu    sync.Mutex
	lines int
}

func (b *brokenPipe) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.lines++; b.lines > 1 {
		return 0, syscall.EPIPE
	}
	return len(p), nil
}

// TestParkctlReplayToAClosedPipe: replay's output closes after one line;
// replay ends at once, with status 0, and leaves no subscription of its
// own behind.
func TestParkctlReplayToAClosedPipe(t *testing.T) {
	srv, ctx := parkedNoService(t)
	var errOut harness.Buffer
	code := run(ctx, []string{"replay", "ledger", "-quiet", "30s"}, &brokenPipe{}, &errOut)
	assert.Equal(t, exitOK, code, errOut.String())
	assert.Empty(t, errOut.String())
	for _, s := range srv.Subscriptions() {
		assert.NotContains(t, s, "keyorder-replay-", "replay's subscription is left behind")
	}
}

// TestParkctlUnreachable: the server's port is closed. Every command says,
// within a few seconds (-reach), that the server cannot be reached, not
// that a deadline passed.
func TestParkctlUnreachable(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := l.Addr().String()
	require.NoError(t, l.Close())
	t.Setenv(harness.EmulatorEnv, addr)
	t.Setenv("GOOGLE_CLOUD_PROJECT", "")
	ctx := harness.Context(t, time.Minute)
	global := []string{"-sub", "ledger-balances", "-parking", "ledger-parked"}
	for _, tc := range []struct {
		name  string
		args  []string
		limit time.Duration
	}{
		{"list, with the default -reach", append([]string{"list"}, global...), 10 * time.Second},
		{"release", append([]string{"release", "-reach", "1s", "acct-1"}, global...), 5 * time.Second},
		{"withdraw", append([]string{"withdraw", "-reach", "1s", "acct-1"}, global...), 5 * time.Second},
		{"replay", []string{"replay", "-reach", "1s", "ledger"}, 5 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			start := time.Now()
			code, _, errOut := parkctl(ctx, tc.args...)
			assert.Less(t, time.Since(start), tc.limit)
			assert.Equal(t, exitFail, code)
			assert.Contains(t, errOut, "cannot reach the Pub/Sub server at "+addr+" (PUBSUB_EMULATOR_HOST)")
		})
	}
}

// TestParkctlUnauthenticatedPush: parkctl opens a push subscription that
// has no push authentication, which it serves no request of.
func TestParkctlUnauthenticatedPush(t *testing.T) {
	t.Setenv("GOOGLE_CLOUD_PROJECT", "")
	srv, client := harness.Fake(t)
	t.Setenv(harness.EmulatorEnv, srv.Addr)
	ctx := harness.Context(t, time.Minute)
	topics := []string{"ledger", "ledger-parked", "ledger-pushed-parking-control"}
	for _, id := range topics {
		_, err := client.TopicAdminClient.CreateTopic(ctx, &pubsubpb.Topic{Name: "projects/keyorder-test/topics/" + id,
			MessageRetentionDuration: durationpb.New(time.Hour)})
		require.NoError(t, err)
	}
	_, err := client.SubscriptionAdminClient.CreateSubscription(ctx, &pubsubpb.Subscription{
		Name: "projects/keyorder-test/subscriptions/ledger-pushed", Topic: "projects/keyorder-test/topics/ledger",
		EnableMessageOrdering: true, PushConfig: &pubsubpb.PushConfig{PushEndpoint: "http://127.0.0.1:1/push"},
	})
	require.NoError(t, err)
	code, out, errOut := parkctl(ctx, "list", "-sub", "ledger-pushed", "-parking", "ledger-parked")
	require.Equal(t, exitOK, code, errOut)
	assert.Equal(t, "no key of projects/keyorder-test/subscriptions/ledger-pushed is parked\n", out)
}

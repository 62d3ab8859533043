package orderingtest_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"cloud.google.com/go/pubsub/v2"
	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"github.com/stretchr/testify/require"

	"github.com/keyorder/keyorder/internal/harness"
	"github.com/keyorder/keyorder/internal/leaktest"
	"github.com/keyorder/keyorder/ordering/orderingtest"
)

func TestMain(m *testing.M) { leaktest.VerifyTestMain(m) }

// testTimeout bounds every wait in this package's tests.
const testTimeout = 15 * time.Second

func topicName(id string) string { return "projects/" + harness.Project + "/topics/" + id }
func subName(id string) string   { return "projects/" + harness.Project + "/subscriptions/" + id }

// fixture is a server, a client, a topic and one subscription to it.
type fixture struct {
	t      testing.TB
	ctx    context.Context
	srv    *orderingtest.Server
	client *pubsub.Client
	topic  string
	sub    string
}

// newFixture starts a server with opts and creates topic "topic" and an
// ordered subscription "sub", which edit may change before it is created.
func newFixture(t testing.TB, edit func(*pubsubpb.Subscription), opts ...orderingtest.Option) *fixture {
	t.Helper()
	srv, client := harness.Fake(t, opts...)
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	t.Cleanup(cancel)
	f := &fixture{t: t, ctx: ctx, srv: srv, client: client, topic: topicName("topic"), sub: subName("sub")}
	f.createTopic(&pubsubpb.Topic{Name: f.topic})
	p := &pubsubpb.Subscription{Name: f.sub, Topic: f.topic, EnableMessageOrdering: true}
	if edit != nil {
		edit(p)
	}
	f.createSubscription(p)
	return f
}

func (f *fixture) createTopic(p *pubsubpb.Topic) {
	f.t.Helper()
	_, err := f.client.TopicAdminClient.CreateTopic(f.ctx, p)
	require.NoError(f.t, err)
}

func (f *fixture) createSubscription(p *pubsubpb.Subscription) {
	f.t.Helper()
	_, err := f.client.SubscriptionAdminClient.CreateSubscription(f.ctx, p)
	require.NoError(f.t, err)
}

// payload is the data of the seq-th message of key: "key/seq".
func payload(key string, seq int) string { return key + "/" + strconv.Itoa(seq) }

// parse splits a payload back into key and seq. Handlers call it, off the
// test's goroutine, so it reports a bad payload without stopping the test.
func parse(t testing.TB, data []byte) (string, int) {
	t.Helper()
	key, n, ok := strings.Cut(string(data), "/")
	seq, err := strconv.Atoi(n)
	if !ok || err != nil {
		t.Errorf("bad payload %q", data)
	}
	return key, seq
}

// publish sends messages from+1..from+n of each key through the official
// publisher, with ordering on, and waits until all are stored.
func (f *fixture) publish(topic string, keys []string, from, n int) {
	f.t.Helper()
	p := f.client.Publisher(topic)
	defer p.Stop()
	p.EnableMessageOrdering = true
	var results []*pubsub.PublishResult
	for i := from + 1; i <= from+n; i++ {
		for _, k := range keys {
			results = append(results, p.Publish(f.ctx, &pubsub.Message{Data: []byte(payload(k, i)), OrderingKey: k}))
		}
	}
	for _, r := range results {
		_, err := r.Get(f.ctx)
		require.NoError(f.t, err)
	}
}

// receive runs Receive on sub with settings until the returned stop is
// called; stop waits for Receive to return and checks it returned nil.
func (f *fixture) receive(sub string, settings *pubsub.ReceiveSettings, handler func(context.Context, *pubsub.Message)) (stop func()) {
	f.t.Helper()
	s := f.client.Subscriber(sub)
	if settings != nil {
		s.ReceiveSettings = *settings
	}
	ctx, cancel := context.WithCancel(f.ctx)
	done := make(chan error, 1)
	go func() { done <- s.Receive(ctx, handler) }()
	stopped := false
	stop = func() {
		f.t.Helper()
		if stopped {
			return
		}
		stopped = true
		cancel()
		select {
		case err := <-done:
			require.NoError(f.t, err)
		case <-time.After(testTimeout):
			f.t.Fatal("Receive did not return")
		}
	}
	f.t.Cleanup(stop)
	return stop
}

// waitFor waits on the server until cond holds.
func (f *fixture) waitFor(what string, cond func() bool) {
	f.t.Helper()
	if err := f.srv.WaitFor(f.ctx, cond); err != nil {
		f.t.Fatalf("waiting for %s: %v", what, err)
	}
}

// keys returns n key names.
func keys(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("key-%03d", i)
	}
	return out
}

// recv receives one value from ch within the test timeout.
func recv[T any](t testing.TB, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(testTimeout):
		t.Fatalf("timed out waiting for %s", what)
		panic("unreachable")
	}
}

// pullNow pulls from sub without waiting. ReturnImmediately is deprecated
// because it hurts Pull's performance on the service; on the fake it shows
// that nothing is available without waiting for a timeout.
func (f *fixture) pullNow(sub string, max int32) []*pubsubpb.ReceivedMessage {
	f.t.Helper()
	//lint:ignore SA1019 see above
	req := &pubsubpb.PullRequest{Subscription: sub, MaxMessages: max, ReturnImmediately: true}
	res, err := f.client.SubscriptionAdminClient.Pull(f.ctx, req)
	require.NoError(f.t, err)
	return res.ReceivedMessages
}

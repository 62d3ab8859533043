package main

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"cloud.google.com/go/pubsub/v2"
	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/keyorder/keyorder/internal/harness"
	"github.com/keyorder/keyorder/ordering/orderingtest"
)

const (
	topicID = "orders"
	subID   = "orders-sub"
)

// emulator is the program running with -fake for one test.
type emulator struct {
	t       *testing.T
	ctx     context.Context
	client  *pubsub.Client
	control string // "http://host:port", or "" without -control
	lines   <-chan string
	topic   string
	sub     string
}

// startFake runs the program with -fake on free ports and args, connects
// a client, and creates an ordered subscription. The program stops when
// the test ends, and must then exit cleanly.
func startFake(t *testing.T, args ...string) *emulator {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	t.Cleanup(cancel)
	serveCtx, stop := context.WithCancel(ctx)
	lines, done := start(t, serveCtx, append([]string{"-port=0", "-fake"}, args...))
	t.Cleanup(func() {
		stop()
		assert.NoError(t, <-done)
	})

	first := next(t, lines)
	require.True(t, strings.HasPrefix(first, "orderingtest serving on "), first)
	addr, ok := strings.CutPrefix(next(t, lines), "export "+harness.EmulatorEnv+"=")
	require.True(t, ok)
	e := &emulator{t: t, ctx: ctx, lines: lines,
		topic: "projects/" + harness.Project + "/topics/" + topicID,
		sub:   "projects/" + harness.Project + "/subscriptions/" + subID,
	}
	for _, a := range args {
		if strings.HasPrefix(a, "-control=") {
			line := next(t, lines)
			e.control, ok = strings.CutPrefix(line, "control endpoint on ")
			require.True(t, ok, line)
		}
	}
	client, err := harness.Connect(ctx, addr)
	require.NoError(t, err)
	t.Cleanup(func() { _ = client.Close() })
	e.client = client
	_, err = e.client.TopicAdminClient.CreateTopic(ctx, &pubsubpb.Topic{Name: e.topic})
	require.NoError(t, err)
	_, err = e.client.SubscriptionAdminClient.CreateSubscription(ctx, &pubsubpb.Subscription{
		Name: e.sub, Topic: e.topic, EnableMessageOrdering: true,
	})
	require.NoError(t, err)
	return e
}

func next(t *testing.T, lines <-chan string) string {
	t.Helper()
	select {
	case l, ok := <-lines:
		require.True(t, ok, "the program's output ended")
		return l
	case <-time.After(10 * time.Second):
		t.Fatal("no output from the program")
		return ""
	}
}

// publish publishes data on key k and returns the result without waiting.
func (e *emulator) publish(data string) *pubsub.PublishResult {
	p := e.client.Publisher(e.topic)
	p.EnableMessageOrdering = true
	r := p.Publish(e.ctx, &pubsub.Message{Data: []byte(data), OrderingKey: "k"})
	go func() { <-r.Ready(); p.Stop() }()
	return r
}

// receive runs Receive on the subscription until the test ends, and sends
// each message to the returned channel; the handler acks it unless hold
// says not to. The test must settle the messages it holds, or Receive
// does not return.
func (e *emulator) receive(hold func(*pubsub.Message) bool) <-chan *pubsub.Message {
	got := make(chan *pubsub.Message, 100)
	ctx, cancel := context.WithCancel(e.ctx)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		assert.NoError(e.t, e.client.Subscriber(e.sub).Receive(ctx, func(_ context.Context, m *pubsub.Message) {
			if hold == nil || !hold(m) {
				m.Ack()
			}
			got <- m
		}))
	}()
	e.t.Cleanup(func() { cancel(); wg.Wait() })
	return got
}

// do calls the control endpoint and decodes a JSON answer into v.
func (e *emulator) do(method, path, body string, v any) int {
	e.t.Helper()
	req, err := http.NewRequestWithContext(e.ctx, method, e.control+path, strings.NewReader(body))
	require.NoError(e.t, err)
	res, err := http.DefaultClient.Do(req)
	require.NoError(e.t, err)
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	require.NoError(e.t, err)
	if v != nil && res.StatusCode < 300 {
		require.NoError(e.t, json.Unmarshal(b, v), "%s", b)
	}
	return res.StatusCode
}

// stats reads the subscription's counters from the control endpoint.
func (e *emulator) stats() orderingtest.Stats {
	var st orderingtest.Stats
	require.Equal(e.t, http.StatusOK, e.do("GET", "/stats?sub="+subID, "", &st))
	return st
}

// waitStats polls the control endpoint, as a test in another language
// would, until cond holds.
func (e *emulator) waitStats(what string, cond func(orderingtest.Stats) bool) {
	e.t.Helper()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for !cond(e.stats()) {
		select {
		case <-tick.C:
		case <-e.ctx.Done():
			e.t.Fatalf("waiting for %s: %v", what, e.stats())
		}
	}
}

func recvMsg(t *testing.T, ch <-chan *pubsub.Message, what string) *pubsub.Message {
	t.Helper()
	select {
	case m := <-ch:
		return m
	case <-time.After(10 * time.Second):
		t.Fatalf("timed out waiting for %s", what)
		return nil
	}
}

// TestAckDeadlineFlag: with -ack-deadline, a message left unacked comes
// back within the short deadline, although the client asks for longer.
func TestAckDeadlineFlag(t *testing.T) {
	t.Parallel()
	e := startFake(t, "-ack-deadline=300ms", "-control=127.0.0.1:0")
	var once sync.Once
	got := e.receive(func(*pubsub.Message) bool {
		held := false
		once.Do(func() { held = true })
		return held
	})
	_, err := e.publish("hello").Get(e.ctx)
	require.NoError(t, err)
	first := recvMsg(t, got, "the message")
	again := recvMsg(t, got, "the message again")
	first.Ack() // stale, and ignored; Receive returns only once every message is settled
	assert.Equal(t, first.ID, again.ID)
	assert.GreaterOrEqual(t, e.stats().Expired, 1)
}

// TestLatencyFlag: with -latency, a publish is answered no sooner.
func TestLatencyFlag(t *testing.T) {
	t.Parallel()
	const d = 100 * time.Millisecond
	e := startFake(t, "-latency="+d.String())
	start := time.Now()
	_, err := e.publish("hello").Get(e.ctx)
	require.NoError(t, err)
	assert.GreaterOrEqual(t, time.Since(start), d)
}

// TestFlagErrors: the fake's flags need -fake and valid values.
func TestFlagErrors(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{
		{"-port=0", "-ack-deadline=1s"},              // needs -fake
		{"-port=0", "-fault=break-streams"},          // needs -fake
		{"-port=0", "-fake", "-response-size=0"},     // out of range
		{"-port=0", "-fake", "-ack-deadline=11m"},    // out of range
		{"-port=0", "-latency=1ms"},                  // needs -fake
		{"-port=0", "-fake", "-latency=2m"},          // out of range
		{"-port=0", "-fake", "-fault=explode"},       // unknown kind
		{"-port=0", "-fake", "-control=256.0.0.1:0"}, // cannot listen
	} {
		assert.Error(t, run(context.Background(), args, io.Discard), "%q", args)
	}
}

// TestScheduledFaults: faults given as flags apply at once or on their
// schedule: a lost publish response stores the message twice, and streams
// break again and again.
func TestScheduledFaults(t *testing.T) {
	t.Parallel()
	e := startFake(t, "-control=127.0.0.1:0",
		"-fault=lose-publish-response,key=k",
		"-fault=break-streams,sub="+subID+",at=100ms,every=100ms")
	assert.Equal(t, "fault 1: lose-publish-response,key=k", next(t, e.lines))
	assert.Equal(t, "fault 2: break-streams,sub="+subID+",at=100ms,every=100ms", next(t, e.lines))

	_, err := e.publish("once").Get(e.ctx)
	require.NoError(t, err)
	got := e.receive(nil)
	a, b := recvMsg(t, got, "the message"), recvMsg(t, got, "its copy")
	assert.Equal(t, "once", string(a.Data))
	assert.Equal(t, "once", string(b.Data))
	assert.NotEqual(t, a.ID, b.ID, "stored twice, with two IDs")

	e.waitStats("two streams broken", func(st orderingtest.Stats) bool { return st.StreamsOpened >= 3 })
	var list []status
	require.Equal(t, http.StatusOK, e.do("GET", "/faults", "", &list))
	require.Len(t, list, 2)
	assert.Equal(t, 1, list[0].Hits)
	assert.GreaterOrEqual(t, list[1].Applied, 3)
}

// TestControlEndpoint injects faults on request and reads the counters, as
// a test in another language would.
func TestControlEndpoint(t *testing.T) {
	t.Parallel()
	e := startFake(t, "-control=127.0.0.1:0")
	var list []status
	require.Equal(t, http.StatusOK, e.do("GET", "/faults", "", &list))
	assert.NotNil(t, list, "[], not null")

	// A hold keeps a publish waiting until it is removed.
	var hold status
	require.Equal(t, http.StatusCreated, e.do("POST", "/faults", "hold-publish,key=k", &hold))
	held := e.publish("k/1")
	for hold.Hits == 0 {
		var list []status
		require.Equal(t, http.StatusOK, e.do("GET", "/faults", "", &list))
		require.Len(t, list, 1)
		hold = list[0]
		select {
		case <-held.Ready():
			t.Fatal("the held publish completed")
		case <-time.After(10 * time.Millisecond):
		case <-e.ctx.Done():
			t.Fatal("the publish was never held")
		}
	}
	require.Equal(t, http.StatusNoContent, e.do("DELETE", "/faults/1", "", nil))
	_, err := held.Get(e.ctx)
	require.NoError(t, err)

	// A message left outstanding comes again with its key's tail.
	var once sync.Once
	got := e.receive(func(*pubsub.Message) bool {
		first := false
		once.Do(func() { first = true })
		return first
	})
	first := recvMsg(t, got, "k/1")
	var redeliver status
	require.Equal(t, http.StatusCreated, e.do("POST", "/faults", "redeliver-key,key=k,sub="+subID, &redeliver))
	assert.Equal(t, status{ID: 2, Spec: "redeliver-key,key=k,sub=" + subID, Applied: 1, Result: 1}, redeliver)
	again := recvMsg(t, got, "k/1 again")
	first.Ack() // stale, and ignored; Receive returns only once every message is settled
	assert.Equal(t, first.ID, again.ID)
	e.waitStats("the redelivery acked", func(st orderingtest.Stats) bool { return st.Acked == 1 && st.Delivered == 2 })

	var subs []string
	require.Equal(t, http.StatusOK, e.do("GET", "/subscriptions", "", &subs))
	assert.Equal(t, []string{e.sub}, subs)
	for _, bad := range []struct {
		method, path, body string
		code               int
	}{
		{"POST", "/faults", "explode", http.StatusBadRequest},
		{"DELETE", "/faults/1", "", http.StatusNotFound}, // removed already
		{"DELETE", "/faults/x", "", http.StatusNotFound},
		{"GET", "/stats?sub=nope", "", http.StatusNotFound},
		{"GET", "/stats", "", http.StatusNotFound},
	} {
		assert.Equal(t, bad.code, e.do(bad.method, bad.path, bad.body, nil), "%s %s", bad.method, bad.path)
	}
}

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"cloud.google.com/go/pubsub/v2"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/keyorder/keyorder/internal/harness"
	"github.com/keyorder/keyorder/internal/leaktest"
	"github.com/keyorder/keyorder/ordering/orderingtest"
	"github.com/keyorder/keyorder/publisher"
	"github.com/keyorder/keyorder/subscriber"
	"github.com/keyorder/keyorder/subscriber/statuspage"
)

func TestMain(m *testing.M) { leaktest.VerifyTestMain(m) }

func testContext(t *testing.T) context.Context { return harness.Context(t, 20*time.Second) }

// open creates or opens cfg's subscription as demo does.
func open(t *testing.T, client *pubsub.Client, cfg config) *subscriber.Subscription {
	t.Helper()
	sub, err := subscription(testContext(t), client, cfg)
	require.NoError(t, err)
	return sub
}

func small(mode string) config {
	return config{mode: mode, customers: 3, events: 3, wait: 15 * time.Second}
}

// TestRunEmbedded runs what `go run ./examples/orders` runs, on an
// embedded pstest, with fewer orders.
func TestRunEmbedded(t *testing.T) {
	t.Setenv(harness.EmulatorEnv, "") // not the developer's emulator
	var out bytes.Buffer
	require.NoError(t, run(testContext(t), small("all"), &out), out.String())
	assert.Contains(t, out.String(), "embedded pstest")
	assert.Contains(t, out.String(), "processed 9 of 9 orders")
	assert.Contains(t, out.String(), "once each, in publish order")
}

// TestDefaultSizesOnFake runs the default sizes on the fake server, which
// delivers much faster than pstest.
func TestDefaultSizesOnFake(t *testing.T) {
	t.Parallel()
	_, client := harness.Fake(t)
	cfg, err := parseFlags(nil)
	require.NoError(t, err)
	var out bytes.Buffer
	require.NoError(t, demo(testContext(t), client, cfg, &out), out.String())
	assert.Contains(t, out.String(), "processed 72 of 72 orders")
}

// TestMissingOrders: orders that never come fail the run once -wait passes.
func TestMissingOrders(t *testing.T) {
	t.Parallel()
	_, client := harness.Fake(t)
	ctx := testContext(t)
	cfg := small("publish")
	cfg.topic, cfg.sub = "orders", "orders-sub"
	require.NoError(t, demo(ctx, client, cfg, &bytes.Buffer{}))

	sub := open(t, client, cfg)
	// One more event than published. The run takes the whole wait, which
	// leaves a loaded machine ample time for the 9 orders that exist.
	cfg.events, cfg.wait = 4, 2*time.Second
	var out bytes.Buffer
	err := receiveAll(ctx, sub, cfg, &out)
	require.ErrorContains(t, err, "only 9 of 12 orders were processed within -wait=2s")
	assert.Contains(t, out.String(), "c-01: 3 records, 4 expected: 1 missing [4]")
}

// TestSharedSubscription runs a publisher and two subscribers on one
// subscription, as the processes of examples/emulator do: each subscriber
// sees each key in increasing order, and together they see every message
// once.
func TestSharedSubscription(t *testing.T) {
	t.Parallel()
	srv, client := harness.Fake(t)
	ctx := testContext(t)
	cfg := config{mode: "subscribe", topic: "orders", sub: "orders-billing", customers: 12, events: 6, wait: time.Minute}
	subCtx, stop := context.WithCancel(ctx)
	defer stop()
	var (
		wg   sync.WaitGroup
		got  [2]map[string][]int
		errs [2]error
	)
	for i := range got {
		// A client each, as separate processes have: two streams.
		c := harness.Client(t, srv.Addr)
		sub := open(t, c, cfg)
		wg.Go(func() { got[i], errs[i] = receiveFor(subCtx, sub, cfg, &bytes.Buffer{}) })
	}
	pub := cfg
	pub.mode = "publish"
	require.NoError(t, demo(ctx, client, pub, &bytes.Buffer{}))

	total := cfg.customers * cfg.events
	require.NoError(t, srv.WaitFor(ctx, func() bool {
		return srv.Stats("projects/"+harness.Project+"/subscriptions/"+cfg.sub).Acked >= total
	}))
	stop()
	wg.Wait()
	require.NoError(t, errs[0])
	require.NoError(t, errs[1])
	for i := range cfg.customers {
		key := customer(i)
		merged := slices.Concat(got[0][key], got[1][key])
		slices.Sort(merged)
		assert.Equal(t, []int{1, 2, 3, 4, 5, 6}, merged, "key %s: %v and %v", key, got[0][key], got[1][key])
	}
}

// TestSubscriberSeesStepBack: a subscriber fails when a key's sequence
// goes back, even though it cannot tell gaps from what others had.
func TestSubscriberSeesStepBack(t *testing.T) {
	t.Parallel()
	srv, client := harness.Fake(t)
	ctx := testContext(t)
	cfg := config{mode: "subscribe", topic: "orders", sub: "orders-sub", wait: time.Minute}
	sub := open(t, client, cfg)
	p, err := publisher.New(client, cfg.topic)
	require.NoError(t, err)
	for _, seq := range []int{1, 3, 2} {
		data, err := json.Marshal(order{Customer: "c-01", Seq: seq})
		require.NoError(t, err)
		_, err = p.Publish(ctx, &publisher.Message{Data: data}, publisher.WithOrderingKey("c-01")).Get(ctx)
		require.NoError(t, err)
	}
	require.NoError(t, p.Close(ctx))

	subCtx, stop := context.WithCancel(ctx)
	acked := make(chan struct{})
	defer func() { stop(); <-acked }()
	go func() {
		defer close(acked)
		_ = srv.WaitFor(subCtx, func() bool { return srv.Stats(sub.Name()).Acked == 3 })
		stop()
	}()
	var out bytes.Buffer
	seqs, err := receiveFor(subCtx, sub, cfg, &out)
	require.ErrorIs(t, err, orderingtest.ErrViolation)
	assert.Equal(t, []int{1, 3, 2}, seqs["c-01"])
	assert.Contains(t, out.String(), "c-01: 1 3 2: NOT INCREASING: 1 out of order [2]")
}

func TestParseFlags(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		err  string
	}{
		{nil, ""},
		{[]string{"-mode=subscribe", "-topic=t", "-sub=s", "-wait=5s"}, ""},
		{[]string{"-mode=publish", "-topic=t"}, "-mode=publish needs -topic and -sub"},
		{[]string{"-mode=both"}, "want all, publish or subscribe"},
		{[]string{"-customers=0"}, "at least 1"},
		{[]string{"-wait=0s"}, "-wait must be positive"},
		{[]string{"extra"}, "unexpected arguments"},
		{[]string{"-status=localhost:8080", "-work=20ms", "-flaky=c-03"}, ""},
		{[]string{"-mode=publish", "-topic=t", "-sub=s", "-status=localhost:8080"}, "-status needs a mode that receives"},
		{[]string{"-work=-1s"}, "-work must not be negative"},
	} {
		_, err := parseFlags(tc.args)
		if tc.err == "" {
			assert.NoError(t, err, "%q", tc.args)
		} else {
			assert.ErrorContains(t, err, tc.err, "%q", tc.args)
		}
	}
}

// TestStatusAndFlaky runs with -status, -work and -flaky on the fake: the
// status page answers while the orders are received, the flaky
// customer's key is held and released, and every customer's orders are
// still processed once each, in order.
func TestStatusAndFlaky(t *testing.T) {
	t.Parallel()
	_, client := harness.Fake(t)
	ctx := testContext(t)
	cfg := config{mode: "all", customers: 4, events: 3, wait: 15 * time.Second,
		status: "127.0.0.1:0", work: 5 * time.Millisecond, flaky: "c-02"}
	var out harness.Buffer
	done := make(chan error, 1)
	go func() { done <- demo(ctx, client, cfg, &out) }()

	var url string
	for url == "" {
		select {
		case err := <-done:
			t.Fatalf("demo returned before its status page was up: %v\n%s", err, out.String())
		case <-time.After(time.Millisecond):
		}
		if _, rest, ok := strings.Cut(out.String(), "status page: "); ok {
			url, _, _ = strings.Cut(rest, "\n")
		}
	}
	res, err := http.Get(url + "?format=json")
	require.NoError(t, err)
	var st statuspage.Status
	require.NoError(t, json.NewDecoder(res.Body).Decode(&st))
	res.Body.Close()
	assert.Contains(t, out.String(), "ordered subscription "+st.Subscription[strings.LastIndexByte(st.Subscription, '/')+1:])

	require.NoError(t, <-done, out.String())
	assert.Contains(t, out.String(), "processed 12 of 12 orders")
	assert.Contains(t, out.String(), "once each, in publish order")
	_, err = http.Get(url)
	assert.Error(t, err, "the page stops with the run")
}

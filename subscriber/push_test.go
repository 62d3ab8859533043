package subscriber_test

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"

	"github.com/keyorder/keyorder/internal/harness"
	"github.com/keyorder/keyorder/internal/metrictest"
	"github.com/keyorder/keyorder/ordering/orderingtest"
	"github.com/keyorder/keyorder/subscriber"
)

// TestPushOrder: many keys pushed at once, one of them failing in the
// middle, twice, before it succeeds. Every message runs once, in order per
// key: the service holds a key's next message until the failed one is
// acked.
func TestPushOrder(t *testing.T) {
	t.Parallel()
	keys := keyNames(12)
	const perKey = 8
	tr := newTracker(keys, perKey)
	var failures atomic.Int32
	e := newPushEnv(t, tr.handler(func(_ context.Context, d *subscriber.Delivery) error {
		if string(d.Data) == "key-3/5" && failures.Add(1) <= 2 {
			return errInjected
		}
		return nil
	}))
	assert.Equal(t, e.endpoint, e.sub.PushEndpoint())
	email, audience := e.sub.PushAuth()
	assert.Equal(t, pusher, email)
	assert.Equal(t, e.endpoint, audience, "without an audience, the endpoint's URL")

	e.publish(t, keys, perKey)
	select {
	case <-tr.done:
	case <-time.After(testTimeout):
		t.Fatalf("%d messages left; %+v", tr.remaining, e.sub.Stats())
	}
	tr.verify(t)
	assert.Equal(t, 3, tr.callsOf("key-3/5"))
	require.NoError(t, e.srv.WaitFor(testContext(t), func() bool { return e.srv.Stats(e.sub.Name()).Acked == len(keys)*perKey }))
	st := e.sub.Stats()
	assert.EqualValues(t, len(keys)*perKey, st.Acked)
	assert.EqualValues(t, 2, st.Retried)
	assert.Equal(t, 2, e.srv.Stats(e.sub.Name()).Nacked, "each failure answered with a nack")
}

// TestPushCopies: a publish whose response was lost, so that the service
// stored it twice under two message IDs, runs once: the stamp's check
// (S12) applies to pushes as to pulls.
func TestPushCopies(t *testing.T) {
	t.Parallel()
	keys := keyNames(3)
	const perKey = 10
	tr := newTracker(keys, perKey)
	e := newPushEnv(t, tr.handler(func(context.Context, *subscriber.Delivery) error { return nil }))
	lost := e.srv.LosePublishResponses(orderingtest.Data("key-1/4"), codes.Unavailable, 1)
	e.publish(t, keys, perKey)
	require.Equal(t, 1, lost.Hits())
	stored := len(e.srv.Messages(e.topic))
	require.Greater(t, stored, len(keys)*perKey, "the retried request was stored twice")
	require.NoError(t, e.srv.WaitFor(testContext(t), func() bool { return e.srv.Stats(e.sub.Name()).Acked == stored }))
	tr.verify(t)
	assert.EqualValues(t, stored-len(keys)*perKey, e.sub.Stats().Duplicates)
}

// TestPushRefusesStrangers: only a request with a valid Google-signed
// token of the subscription's account, for its audience, runs the
// handler; the others are answered 401, or 403 for another account's
// token, and leave no trace in the handler.
func TestPushRefusesStrangers(t *testing.T) {
	t.Parallel()
	var calls atomic.Int32
	e := newPushEnv(t, func(context.Context, *subscriber.Delivery) error {
		calls.Add(1)
		return nil
	})
	sign := func(change func(c map[string]any)) string {
		c := e.srv.PushClaims(pusher, e.endpoint)
		change(c)
		token, err := e.srv.SignToken(c)
		require.NoError(t, err)
		return token
	}
	forged, err := e.srv.ForgeToken(e.srv.PushClaims(pusher, e.endpoint))
	require.NoError(t, err)
	for _, tc := range []struct {
		name   string
		token  string
		status int
	}{
		{"no token", "", http.StatusUnauthorized},
		{"not a token", "not-a-jwt", http.StatusUnauthorized},
		{"signed by another key", forged, http.StatusUnauthorized},
		{"for another audience", sign(func(c map[string]any) { c["aud"] = "https://elsewhere.example/push" }), http.StatusUnauthorized},
		{"expired", sign(func(c map[string]any) { c["exp"] = time.Now().Add(-time.Minute).Unix() }), http.StatusUnauthorized},
		{"from another issuer", sign(func(c map[string]any) { c["iss"] = "https://issuer.example" }), http.StatusUnauthorized},
		{"of another account", sign(func(c map[string]any) { c["email"] = "someone@example.com" }), http.StatusForbidden},
		{"with an unverified email", sign(func(c map[string]any) { c["email_verified"] = false }), http.StatusForbidden},
	} {
		t.Run(tc.name, func(t *testing.T) {
			body := pushBody(t, e.sub.Name(), "m-"+strings.ReplaceAll(tc.name, " ", "-"), "k", "hello")
			assert.Equal(t, tc.status, e.post(t, http.MethodPost, tc.token, body))
		})
	}
	assert.Zero(t, calls.Load(), "the handler never ran")

	// The same request with the real thing runs it.
	good := sign(func(map[string]any) {})
	assert.Equal(t, http.StatusNoContent, e.post(t, http.MethodPost, good, pushBody(t, e.sub.Name(), "m-good", "k", "hello")))
	assert.Equal(t, int32(1), calls.Load())
}

// TestPushRefusesMalformedRequests: a body that is not a push of this
// subscription gets 400, and a method other than POST 405; the handler
// never runs.
func TestPushRefusesMalformedRequests(t *testing.T) {
	t.Parallel()
	var calls atomic.Int32
	e := newPushEnv(t, func(context.Context, *subscriber.Delivery) error {
		calls.Add(1)
		return nil
	})
	token, err := e.srv.SignToken(e.srv.PushClaims(pusher, e.endpoint))
	require.NoError(t, err)
	for _, tc := range []struct {
		name   string
		method string
		body   []byte
		status int
	}{
		{"not JSON", http.MethodPost, []byte("hello"), http.StatusBadRequest},
		{"no message ID", http.MethodPost, pushBody(t, e.sub.Name(), "", "k", "x"), http.StatusBadRequest},
		{"another subscription", http.MethodPost, pushBody(t, "projects/p/subscriptions/other", "m-1", "k", "x"), http.StatusBadRequest},
		{"data not base64", http.MethodPost, []byte(`{"message":{"data":"%%%","messageId":"m-2"},"subscription":"` + e.sub.Name() + `"}`), http.StatusBadRequest},
		{"GET", http.MethodGet, nil, http.StatusMethodNotAllowed},
		{"PUT", http.MethodPut, pushBody(t, e.sub.Name(), "m-3", "k", "x"), http.StatusMethodNotAllowed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.status, e.post(t, tc.method, token, tc.body))
		})
	}
	assert.Zero(t, calls.Load(), "the handler never ran")
}

// TestPushFailures: a handler that panics, or exits its goroutine, still
// gets its request answered, with a nack (S11); the message comes back
// and runs again, and the key's next message waits for it.
func TestPushFailures(t *testing.T) {
	t.Parallel()
	tr := newTracker([]string{"k"}, 4)
	var panicked, exited atomic.Bool
	e := newPushEnv(t, tr.handler(func(_ context.Context, d *subscriber.Delivery) error {
		switch string(d.Data) {
		case "k/2":
			if panicked.CompareAndSwap(false, true) {
				panic("injected")
			}
		case "k/3":
			if exited.CompareAndSwap(false, true) {
				runtime.Goexit()
			}
		}
		return nil
	}))
	e.publish(t, []string{"k"}, 4)
	select {
	case <-tr.done:
	case <-time.After(testTimeout):
		t.Fatalf("%d left; %+v", tr.remaining, e.sub.Stats())
	}
	tr.verify(t)
	assert.Equal(t, 2, tr.callsOf("k/2"))
	assert.Equal(t, 2, tr.callsOf("k/3"))
	require.NoError(t, e.srv.WaitFor(testContext(t), func() bool { return e.srv.Stats(e.sub.Name()).Acked == 4 }))
	assert.Equal(t, 2, e.srv.Stats(e.sub.Name()).Nacked)
}

// TestPushDeadLettering: on a push subscription with a dead-letter policy,
// a message that keeps failing is dead-lettered by the service after its
// delivery attempts, and the key goes on; the handler saw the service's
// attempt count, and keyorder's attempts across the pushes.
func TestPushDeadLettering(t *testing.T) {
	t.Parallel()
	topic, _ := names()
	dlq := "dead-" + topic
	var mu sync.Mutex
	var seen []string
	var attempts []int
	e := newPushEnv(t, func(_ context.Context, d *subscriber.Delivery) error {
		mu.Lock()
		defer mu.Unlock()
		seen = append(seen, string(d.Data))
		if string(d.Data) == "k/2" {
			attempts = append(attempts, d.DeliveryAttempt)
			return errInjected
		}
		return nil
	}, subscriber.WithDeadLetterPolicy(dlq, 5), subscriber.WithMaxAttempts(2))
	e.publish(t, []string{"k"}, 3)
	deadTopic := path(e.client, "topics", dlq)
	require.NoError(t, e.srv.WaitFor(testContext(t), func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(e.srv.Messages(deadTopic)) == 1 && contains(seen, "k/3")
	}))
	mu.Lock()
	defer mu.Unlock()
	assert.Equal(t, []int{1, 2, 3, 4, 5}, attempts)
	assert.Equal(t, []string{"k/1", "k/2", "k/2", "k/2", "k/2", "k/2", "k/3"}, seen)
	assert.EqualValues(t, 1, e.sub.Stats().DeadLettered)
}

// TestPushClose: after Close, a push is answered 503, so that the service
// sends it again; a call running when Close began finishes first.
func TestPushClose(t *testing.T) {
	t.Parallel()
	running, release := make(chan struct{}), make(chan struct{})
	e := newPushSub(t)
	var calls atomic.Int32
	e.mux.Handle("/push", e.sub.PushHandler(func(ctx context.Context, d *subscriber.Delivery) error {
		if calls.Add(1) == 1 {
			close(running)
			<-release
		}
		return nil
	}))
	e.publish(t, []string{"k"}, 2)
	<-running
	closed := e.closing(t)
	select {
	case err := <-closed:
		t.Fatalf("Close returned (%v) while a call ran", err)
	default:
	}
	close(release)
	require.NoError(t, <-closed)
	require.NoError(t, e.srv.WaitFor(testContext(t), func() bool { return e.srv.Stats(e.sub.Name()).Acked == 1 }), "the running call's message was acked")
	assert.Equal(t, int32(1), calls.Load(), "k/2 did not run after Close")
}

// TestPushNeedsAuthentication: a push subscription without a token is
// refused unless WithUnauthenticatedPush says it is meant; then it is
// logged once, and requests without a token run the handler. It sets the
// default logger, so it does not run in parallel.
func TestPushNeedsAuthentication(t *testing.T) {
	var logs metrictest.Log
	prev := slog.Default()
	slog.SetDefault(logs.Logger())
	t.Cleanup(func() { slog.SetDefault(prev) })
	srv, client := harness.Fake(t)
	ctx := testContext(t)
	mux := http.NewServeMux()
	web := httptest.NewServer(mux)
	defer web.Close()
	topic, subID := names()
	_, err := subscriber.CreateWithTopic(ctx, client, topic, subID, subscriber.WithPush(web.URL+"/push"))
	require.ErrorIs(t, err, subscriber.ErrInvalidConfig)
	assert.Empty(t, srv.Subscriptions(), "nothing was created")
	_, err = subscriber.CreateWithTopic(ctx, client, topic, subID, subscriber.WithPush("ftp://example.com/push"), subscriber.WithUnauthenticatedPush())
	require.ErrorIs(t, err, subscriber.ErrInvalidConfig)

	s, err := subscriber.CreateWithTopic(ctx, client, topic, subID, subscriber.WithPush(web.URL+"/push"),
		subscriber.WithUnauthenticatedPush(), subscriber.WithRetryPolicy(0, 0))
	require.NoError(t, err)
	got := make(chan string, 1)
	mux.Handle("/push", s.PushHandler(func(_ context.Context, d *subscriber.Delivery) error {
		got <- string(d.Data)
		return nil
	}))
	defer func() { require.NoError(t, s.Close(ctx)) }()
	publishRange(t, client, s.Topic(), []string{"k"}, 1, 1, "")
	select {
	case data := <-got:
		assert.Equal(t, "k/1", data)
	case <-time.After(testTimeout):
		t.Fatal("no push")
	}
	var warned int
	for _, rec := range logs.Records(t) {
		if strings.Contains(rec["msg"].(string), "carry no token") {
			warned++
		}
	}
	assert.Equal(t, 1, warned, "warned once: %v", logs.Records(t))

	// Opening it again needs the option too.
	_, err = subscriber.Open(ctx, client, subID)
	require.ErrorIs(t, err, subscriber.ErrInvalidConfig)
	// And a push subscription does not pull.
	other, err := subscriber.Open(ctx, client, subID, subscriber.WithUnauthenticatedPush())
	require.NoError(t, err)
	require.ErrorIs(t, other.Receive(ctx, func(context.Context, *subscriber.Delivery) error { return nil }), subscriber.ErrInvalidConfig)
}

// TestPushHandlerMisuse: PushHandler panics, when called, on a pull
// subscription, with a nil handler, or a second time.
func TestPushHandlerMisuse(t *testing.T) {
	t.Parallel()
	e := newPushSub(t)
	h := func(context.Context, *subscriber.Delivery) error { return nil }
	assert.PanicsWithValue(t, "subscriber: PushHandler with a nil Handler", func() { e.sub.PushHandler(nil) })
	e.mux.Handle("/push", e.sub.PushHandler(h))
	defer func() { require.NoError(t, e.sub.Close(context.Background())) }()
	assert.Panics(t, func() { e.sub.PushHandler(h) })
	pull := newFakeEnv(t, nil)
	assert.Panics(t, func() { pull.sub.PushHandler(h) })
}

// TestPushParking: on a push subscription with parking, a message that
// fails for good parks its key, answered 204 once parked; the key's later
// pushes go to the parking topic too, while other keys run. Release runs
// the parked messages in order through the push endpoint's handler, and
// the key's next pushes then run. Every message runs once, in order.
func TestPushParking(t *testing.T) {
	t.Parallel()
	tr := newTracker([]string{"other"}, 4)
	tr.expect("k", 7)
	e, pe, fixed := newParkingPushEnv(t, tr)

	e.publishSeqs(t, "k", 1, 5)
	e.publishSeqs(t, "other", 1, 4)
	pe.awaitParked(t, "k", 4)
	require.NoError(t, tr.await(testContext(t), func() bool { return tr.processed("other") == 4 }), "other keys go on")
	assert.Equal(t, 1, tr.processed("k"))
	assert.Equal(t, seqs("k", 2, 5), pe.parkedData())
	assert.EqualValues(t, 4, e.sub.Stats().Parked)

	fixed.Store(true)
	require.NoError(t, e.sub.Release(testContext(t), "k"))
	assert.Equal(t, 5, tr.processed("k"), "Release returns once the parked messages ran")
	e.publishSeqs(t, "k", 6, 7)
	select {
	case <-tr.done:
	case <-time.After(testTimeout):
		t.Fatalf("k has %d processed; %s", tr.processed("k"), pe.describe())
	}
	tr.verify(t)
	assert.EqualValues(t, 4, e.sub.Stats().Released)
}

// TestPushRefusalsAreLoggedOnce: refused requests are logged at Warn once
// a minute at most, the others at Debug, so that a stranger who finds the
// URL cannot flood the log.
func TestPushRefusalsAreLoggedOnce(t *testing.T) {
	t.Parallel()
	var logs metrictest.Log
	e := newPushEnv(t, func(context.Context, *subscriber.Delivery) error { return nil }, subscriber.WithLogger(logs.Logger()))
	for i := 0; i < 5; i++ {
		require.Equal(t, http.StatusUnauthorized, e.post(t, http.MethodPost, "", pushBody(t, e.sub.Name(), "m", "k", "x")))
	}
	recs := records(t, &logs, e.sub.Name())
	assert.Equal(t, 1, count(recs, "WARN", "keyorder/subscriber: push request refused"), "%v", recs)
	assert.Equal(t, 4, count(recs, "DEBUG", "keyorder/subscriber: push request refused"), "%v", recs)
}

// TestPushOntoAPullSubscription: WithPush cannot turn an existing pull
// subscription into a push one, so CreateWithTopic and Open refuse it
// rather than hand back a Subscription whose PushHandler cannot serve.
func TestPushOntoAPullSubscription(t *testing.T) {
	t.Parallel()
	e := newFakeEnv(t, nil)
	ctx := testContext(t)
	opts := []subscriber.Option{subscriber.WithPush("https://example.com/push"), subscriber.WithUnauthenticatedPush()}
	_, err := subscriber.CreateWithTopic(ctx, e.client, e.topic, e.sub.Name(), opts...)
	require.ErrorIs(t, err, subscriber.ErrInvalidConfig)
	_, err = subscriber.Open(ctx, e.client, e.sub.Name(), opts...)
	require.ErrorIs(t, err, subscriber.ErrInvalidConfig)
}

// TestPushReleaseFromAnotherProcess: a key parked by a push endpoint is
// released by an operator's program that runs no Receive: its Release
// records a request in the control log, the push endpoint carries it out
// through its handler, in order, and the operator's call returns once the
// key is unparked.
func TestPushReleaseFromAnotherProcess(t *testing.T) {
	t.Parallel()
	tr := newTracker(nil, 0)
	tr.expect("k", 4)
	e, pe, fixed := newParkingPushEnv(t, tr)
	e.publishSeqs(t, "k", 1, 4)
	pe.awaitParked(t, "k", 3)

	operator, err := subscriber.Open(testContext(t), harness.Client(t, e.srv.Addr), e.sub.Name(), subscriber.WithParking(pe.parkTopic))
	require.NoError(t, err)
	fixed.Store(true)
	require.NoError(t, operator.Release(testContext(t), "k"))
	select {
	case <-tr.done:
	case <-time.After(testTimeout):
		t.Fatalf("k has %d processed; %s", tr.processed("k"), pe.describe())
	}
	tr.verify(t)
	list, err := operator.Parked(testContext(t))
	require.NoError(t, err)
	assert.Empty(t, list)
}

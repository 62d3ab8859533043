package subscriber_test

// What the package's tests share: the fakes they run on (fakeEnv,
// parkEnv, pushEnv and the dead-letter one), how they publish and
// receive, and how they wait, with channels and deadlines.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"cloud.google.com/go/pubsub/v2"
	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"github.com/keyorder/keyorder/internal/harness"
	"github.com/keyorder/keyorder/internal/metrictest"
	"github.com/keyorder/keyorder/ordering"
	"github.com/keyorder/keyorder/ordering/orderingtest"
	"github.com/keyorder/keyorder/publisher"
	"github.com/keyorder/keyorder/subscriber"
	"github.com/stretchr/testify/require"
	"google.golang.org/api/idtoken"
	"google.golang.org/api/iterator"
)

// poll waits until cond holds, checking it every millisecond, or returns
// ctx.Err(). It is for conditions nothing signals, such as a delivery
// reaching Receive.
func poll(ctx context.Context, cond func() bool) error {
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	for !cond() {
		select {
		case <-tick.C:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

const testTimeout = 30 * time.Second

func testContext(t testing.TB) context.Context { return harness.Context(t, testTimeout) }

var seq atomic.Int64

// names returns fresh topic and subscription IDs.
func names() (topic, sub string) {
	n := seq.Add(1)
	return fmt.Sprintf("topic-%d", n), fmt.Sprintf("sub-%d", n)
}

// createDirectly creates sub's topic, the other topics named, and sub
// itself through the admin API, bypassing keyorder.
func createDirectly(t *testing.T, c *pubsub.Client, sub *pubsubpb.Subscription, topics ...string) {
	t.Helper()
	ctx := testContext(t)
	for _, tp := range append([]string{sub.Topic}, topics...) {
		_, err := c.TopicAdminClient.CreateTopic(ctx, &pubsubpb.Topic{Name: tp})
		require.NoError(t, err)
	}
	_, err := c.SubscriptionAdminClient.CreateSubscription(ctx, sub)
	require.NoError(t, err)
}

func path(c *pubsub.Client, kind, id string) string {
	return "projects/" + c.Project() + "/" + kind + "/" + id
}

// awaitEvent returns the next event of kind from events, skipping others.
func awaitEvent(t *testing.T, events <-chan subscriber.KeyEvent, kind subscriber.KeyEventKind) subscriber.KeyEvent {
	t.Helper()
	deadline := time.After(testTimeout)
	for {
		select {
		case ev := <-events:
			if ev.Kind == kind {
				return ev
			}
		case <-deadline:
			t.Fatalf("no %v event", kind)
		}
	}
}

// publishAttrs publishes one message of key with data and attrs through
// the official client, as a redrive does.
func publishAttrs(t *testing.T, client *pubsub.Client, topic, key, data string, attrs map[string]string) {
	t.Helper()
	ctx := testContext(t)
	p := client.Publisher(topic)
	p.EnableMessageOrdering = true
	defer p.Stop()
	_, err := p.Publish(ctx, &pubsub.Message{Data: []byte(data), OrderingKey: key, Attributes: attrs}).Get(ctx)
	require.NoError(t, err)
}

func countOf(list []string, s string) int {
	n := 0
	for _, x := range list {
		if x == s {
			n++
		}
	}
	return n
}

var errInjected = errors.New("injected handler failure")

// fast keeps retries short in tests.
var fast = subscriber.WithBackoff(time.Millisecond, 2*time.Millisecond)

// seqRecorder records the stamps a handler processed, in order.
type seqRecorder struct {
	mu   sync.Mutex
	seqs []uint64
	data []string
}

func (r *seqRecorder) add(d *subscriber.Delivery) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.seqs = append(r.seqs, d.Seq)
	r.data = append(r.data, string(d.Data))
}

func (r *seqRecorder) snapshot() ([]uint64, []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]uint64(nil), r.seqs...), append([]string(nil), r.data...)
}

// topicIDs lists the IDs of the topics of client's project.
func topicIDs(t *testing.T, client *pubsub.Client) []string {
	t.Helper()
	var ids []string
	it := client.TopicAdminClient.ListTopics(testContext(t), &pubsubpb.ListTopicsRequest{Project: "projects/" + client.Project()})
	for {
		tp, err := it.Next()
		if err == iterator.Done {
			return ids
		}
		require.NoError(t, err)
		ids = append(ids, tp.Name[strings.LastIndexByte(tp.Name, '/')+1:])
	}
}

// records returns the records of logs whose subscription is sub.
func records(t *testing.T, logs *metrictest.Log, sub string) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, rec := range logs.Records(t) {
		if rec["subscription"] == sub {
			out = append(out, rec)
		}
	}
	return out
}

// count returns how many of recs have level and msg.
func count(recs []map[string]any, level, msg string) int {
	n := 0
	for _, r := range recs {
		if r["level"] == level && r["msg"] == msg {
			n++
		}
	}
	return n
}

// awaitRequested waits until Parked, through e.sub, shows a release of key
// requested, and returns the key as it shows it.
func (e parkEnv) awaitRequested(t *testing.T, key string) subscriber.ParkedKey {
	t.Helper()
	return e.awaitKey(t, key, "a release requested", func(k subscriber.ParkedKey) bool { return !k.ReleaseRequested.IsZero() })
}

// awaitDone waits until the tracker has seen every message it expects.
func awaitDone(t *testing.T, tr *tracker, key string) {
	t.Helper()
	select {
	case <-tr.done:
	case <-time.After(testTimeout):
		t.Fatalf("%s has %d processed", key, tr.processed(key))
	}
}

// testParkingWait is the parking wait of the tests' Subscriptions that
// park, unless a test of the wait sets its own.
const testParkingWait = 100 * time.Millisecond

// parkEnv is a fakeEnv whose subscription parks keys.
type parkEnv struct {
	fakeEnv
	parkTopic string // full name
}

// newParkEnv makes a parkEnv on a fake started with fopts. Its parking
// wait is short, 100 ms, since every park waits it before its ack; a test
// of the wait gives its own WithParkingWait in sopts, which comes later.
func newParkEnv(t *testing.T, fopts []orderingtest.Option, sopts ...subscriber.Option) parkEnv {
	t.Helper()
	topic, _ := names()
	park := "parked-" + topic
	e := newFakeEnv(t, fopts, append([]subscriber.Option{subscriber.WithParking(park), subscriber.WithParkingWait(testParkingWait), fast}, sopts...)...)
	return parkEnv{fakeEnv: e, parkTopic: path(e.client, "topics", park)}
}

// parkedData returns the data of the messages on the parking topic, in
// the order they were stored.
func (e parkEnv) parkedData() []string {
	var out []string
	for _, m := range e.srv.Messages(e.parkTopic) {
		out = append(out, string(m.Data))
	}
	return out
}

// describe says what e holds, for a failure message.
func (e parkEnv) describe() string {
	list, err := e.sub.Parked(context.Background())
	return fmt.Sprintf("parked %+v %v; parking topic %v; server %+v; subscriber %+v", list, err, e.parkedData(), e.srv.Stats(e.sub.Name()), e.sub.Stats())
}

// seqs returns "key/from" .. "key/to".
func seqs(key string, from, to int) []string {
	var out []string
	for i := from; i <= to; i++ {
		out = append(out, fmt.Sprintf("%s/%d", key, i))
	}
	return out
}

// publishSeqs publishes messages from..to of key, in order, and waits for
// them.
func (e fakeEnv) publishSeqs(t *testing.T, key string, from, to int) {
	t.Helper()
	ctx := testContext(t)
	p, err := publisher.New(e.client, e.topic)
	require.NoError(t, err)
	var results []*publisher.Result
	for _, data := range seqs(key, from, to) {
		results = append(results, p.Publish(ctx, &publisher.Message{Data: []byte(data)}, publisher.WithOrderingKey(key)))
	}
	for _, r := range results {
		_, err := r.Get(ctx)
		require.NoError(t, err)
	}
	require.NoError(t, p.Close(ctx))
}

// start runs s.Receive with h until the returned stop is called, which
// waits for it and checks it returned nil. The test fails if Receive
// returns early.
func start(t *testing.T, s *subscriber.Subscription, h subscriber.Handler) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Receive(ctx, h) }()
	stopped := false
	stop = func() {
		t.Helper()
		if stopped {
			return
		}
		stopped = true
		cancel()
		select {
		case err := <-done:
			require.NoError(t, err)
		case <-time.After(testTimeout):
			t.Fatal("Receive did not return")
		}
	}
	t.Cleanup(stop)
	return stop
}

// awaitParked waits until Parked, through e.sub, lists key parked with n
// messages.
func (e parkEnv) awaitParked(t *testing.T, key string, n int) subscriber.ParkedKey {
	t.Helper()
	return e.awaitKey(t, key, fmt.Sprintf("%d messages parked", n), func(k subscriber.ParkedKey) bool { return k.Messages == n })
}

// awaitKey waits until Parked, through e.sub, lists key as cond wants it,
// and returns it as listed; what says what is awaited, for a failure.
func (e parkEnv) awaitKey(t *testing.T, key, what string, cond func(subscriber.ParkedKey) bool) subscriber.ParkedKey {
	t.Helper()
	ctx := testContext(t)
	var got subscriber.ParkedKey
	require.NoError(t, e.srv.WaitFor(ctx, func() bool {
		list, err := e.sub.Parked(ctx)
		if err != nil {
			return false
		}
		for _, k := range list {
			if k.Key == key && cond(k) {
				got = k
				return true
			}
		}
		return false
	}), "%s never had %s: %v", key, what, e.describe())
	return got
}

// reopen opens e's subscription again, through client, as another
// process would, parking on the same topic.
func (e parkEnv) reopen(t *testing.T, client *pubsub.Client, sopts ...subscriber.Option) *subscriber.Subscription {
	t.Helper()
	s, err := subscriber.Open(testContext(t), client, e.sub.Name(), append([]subscriber.Option{subscriber.WithParking(e.parkTopic), subscriber.WithParkingWait(testParkingWait), fast}, sopts...)...)
	require.NoError(t, err)
	return s
}

// calls records handler calls as "key/seq" strings, in order.
type calls struct {
	mu   sync.Mutex
	list []string
	ch   chan struct{} // signalled after every call
}

func (c *calls) add(d *subscriber.Delivery) {
	c.mu.Lock()
	c.list = append(c.list, string(d.Data))
	c.mu.Unlock()
	select {
	case c.ch <- struct{}{}:
	default:
	}
}

func (c *calls) snapshot() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.list...)
}

// receiveWhile runs Receive with h until cond holds of the calls so far.
func receiveWhile(t *testing.T, s *subscriber.Subscription, c *calls, h subscriber.Handler, cond func([]string) bool) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- s.Receive(ctx, h) }()
	deadline := time.After(testTimeout)
	for !cond(c.snapshot()) {
		select {
		case <-c.ch:
		case err := <-done:
			t.Fatalf("Receive returned early: %v", err)
		case <-deadline:
			list := c.snapshot()
			t.Fatalf("gave up after %d calls; the last ones: %v", len(list), list[max(0, len(list)-10):])
		}
	}
	cancel()
	require.NoError(t, <-done)
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// newDeadLetterEnv makes, on the fake started with fopts, an ordered
// subscription with a dead-letter policy of 5 delivery attempts, created
// directly (as one made outside keyorder), and opens it with sopts. It
// returns the env and the dead-letter topic's full name.
func newDeadLetterEnv(t *testing.T, fopts []orderingtest.Option, sopts ...subscriber.Option) (fakeEnv, string) {
	t.Helper()
	srv, client := harness.Fake(t, fopts...)
	topic, subID := names()
	dlq, _ := names()
	dead := path(client, "topics", dlq)
	createDirectly(t, client, &pubsubpb.Subscription{
		Name: path(client, "subscriptions", subID), Topic: path(client, "topics", topic), EnableMessageOrdering: true,
		DeadLetterPolicy: &pubsubpb.DeadLetterPolicy{DeadLetterTopic: dead, MaxDeliveryAttempts: 5},
	}, dead)
	s, err := subscriber.Open(testContext(t), client, subID, sopts...)
	require.NoError(t, err)
	return fakeEnv{srv: srv, client: client, topic: s.Topic(), sub: s}, dead
}

// pusher is the service account the tests' push subscriptions sign as.
const pusher = "pusher@keyorder-test.iam.gserviceaccount.com"

// pushEnv is the faithful fake with a topic and an ordered push
// subscription on it, authenticated, whose endpoint is served by the
// subscription's PushHandler on an httptest server.
type pushEnv struct {
	fakeEnv
	web      *httptest.Server
	endpoint string // the push endpoint's URL, the tokens' audience
	mux      *http.ServeMux
}

// newPushEnv makes a pushEnv whose endpoint runs h. The subscription's
// retry policy is short, so that a failed message comes back quickly.
func newPushEnv(t *testing.T, h subscriber.Handler, sopts ...subscriber.Option) pushEnv {
	t.Helper()
	e := newPushSub(t, sopts...)
	e.mux.Handle("/push", e.sub.PushHandler(h))
	t.Cleanup(func() { require.NoError(t, e.sub.Close(context.Background())) })
	return e
}

// pushServers starts, for the length of the test, the fake and an
// httptest server whose mux is to serve the push endpoint, and returns
// the fake's token validator.
func pushServers(t *testing.T) (*orderingtest.Server, *pubsub.Client, *httptest.Server, *http.ServeMux, *idtoken.Validator) {
	t.Helper()
	srv, client := harness.Fake(t)
	mux := http.NewServeMux()
	web := httptest.NewServer(mux)
	t.Cleanup(web.Close)
	validator, err := srv.TokenValidator(testContext(t))
	require.NoError(t, err)
	return srv, client, web, mux, validator
}

// newPushSub makes a pushEnv whose endpoint is not mounted yet.
func newPushSub(t *testing.T, sopts ...subscriber.Option) pushEnv {
	t.Helper()
	srv, client, web, mux, validator := pushServers(t)
	topic, subID := names()
	endpoint := web.URL + "/push"
	opts := append([]subscriber.Option{
		subscriber.WithPush(endpoint), subscriber.WithPushAuth(pusher, ""), subscriber.WithTokenValidator(validator),
		subscriber.WithRetryPolicy(0, 0), fast,
	}, sopts...)
	s, err := subscriber.CreateWithTopic(testContext(t), client, topic, subID, opts...)
	require.NoError(t, err)
	return pushEnv{fakeEnv: fakeEnv{srv: srv, client: client, topic: s.Topic(), sub: s}, web: web, endpoint: endpoint, mux: mux}
}

// pushBody is the envelope of a push of data on key to sub.
func pushBody(t *testing.T, sub, id, key, data string) []byte {
	t.Helper()
	body, err := json.Marshal(map[string]any{
		"message":      map[string]any{"data": []byte(data), "messageId": id, "orderingKey": key, "publishTime": time.Now().Format(time.RFC3339Nano)},
		"subscription": sub,
	})
	require.NoError(t, err)
	return body
}

// post sends a push request to e's endpoint with the given token ("" for
// none) and returns the status.
func (e pushEnv) post(t *testing.T, method, token string, body []byte) int {
	t.Helper()
	req, err := http.NewRequestWithContext(testContext(t), method, e.endpoint, bytes.NewReader(body))
	require.NoError(t, err)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	res, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	_ = res.Body.Close()
	return res.StatusCode
}

// newParkingPushEnv is a pushEnv that parks, whose handler is tr's and
// fails k/2 for good until fixed is set; pe is the same env seen as a
// parkEnv.
func newParkingPushEnv(t *testing.T, tr *tracker) (e pushEnv, pe parkEnv, fixed *atomic.Bool) {
	t.Helper()
	topic, _ := names()
	park := "parked-" + topic
	fixed = new(atomic.Bool)
	e = newPushEnv(t, tr.handler(func(_ context.Context, d *subscriber.Delivery) error {
		if string(d.Data) == "k/2" && !fixed.Load() {
			return subscriber.Permanent(errInjected)
		}
		return nil
	}), subscriber.WithParking(park), subscriber.WithParkingWait(100*time.Millisecond))
	return e, parkEnv{fakeEnv: e.fakeEnv, parkTopic: path(e.client, "topics", park)}, fixed
}

// await returns the result of a call running on another goroutine, such
// as Replay's or Release's, or fails the test after testTimeout.
func await(t *testing.T, done <-chan error) error {
	t.Helper()
	select {
	case err := <-done:
		return err
	case <-time.After(testTimeout):
		t.Fatalf("no result in %v", testTimeout)
		return nil
	}
}

// stamped is one message to publish with a stamp set by hand, as a
// producer that stamps its messages would.
type stamped struct {
	key, data string
	stamp     ordering.Stamp
}

// publishStamped publishes msgs in order through the official client with
// message ordering, and returns each one's publish error.
func publishStamped(t *testing.T, client *pubsub.Client, topic string, msgs []stamped) []error {
	t.Helper()
	ctx := testContext(t)
	p := client.Publisher(topic)
	p.EnableMessageOrdering = true
	defer p.Stop()
	results := make([]*pubsub.PublishResult, len(msgs))
	for i, m := range msgs {
		attrs := map[string]string{}
		m.stamp.Put(attrs)
		results[i] = p.Publish(ctx, &pubsub.Message{Data: []byte(m.data), OrderingKey: m.key, Attributes: attrs})
	}
	errs := make([]error, len(msgs))
	for i, r := range results {
		_, errs[i] = r.Get(ctx)
	}
	return errs
}

// waitStats waits until cond holds of e's subscription stats.
func (e fakeEnv) waitStats(t *testing.T, what string, cond func(orderingtest.Stats) bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	require.NoError(t, e.srv.WaitFor(ctx, func() bool { return cond(e.srv.Stats(e.sub.Name())) }), "%s; stats %+v", what, e.srv.Stats(e.sub.Name()))
}

func fmtErr(err error) string {
	if err == nil {
		return "<nil>"
	}
	return err.Error()
}

// fakeEnv is an ordering-faithful fake server with a topic, a keyorder
// subscription on it and a publisher, for one test.
type fakeEnv struct {
	srv    *orderingtest.Server
	client *pubsub.Client
	topic  string // full names
	sub    *subscriber.Subscription
}

func newFakeEnv(t *testing.T, fopts []orderingtest.Option, sopts ...subscriber.Option) fakeEnv {
	t.Helper()
	srv, client := harness.Fake(t, fopts...)
	topic, subID := names()
	s, err := subscriber.CreateWithTopic(testContext(t), client, topic, subID, sopts...)
	require.NoError(t, err)
	return fakeEnv{srv: srv, client: client, topic: s.Topic(), sub: s}
}

// publish sends perKey messages to each key, interleaved, with data
// "key/seq" and seq counting from 1, and waits for them.
func (e fakeEnv) publish(t *testing.T, keys []string, perKey int) {
	t.Helper()
	publishRange(t, e.client, e.topic, keys, 1, perKey, "")
}

// publishRange sends messages first..last of each key to topic,
// interleaved, with data prefix+"key/seq", and waits for them.
func publishRange(t *testing.T, client *pubsub.Client, topic string, keys []string, first, last int, prefix string) {
	t.Helper()
	ctx := testContext(t)
	p, err := publisher.New(client, topic)
	require.NoError(t, err)
	var results []*publisher.Result
	for i := first; i <= last; i++ {
		for _, k := range keys {
			results = append(results, p.Publish(ctx, &publisher.Message{Data: []byte(fmt.Sprintf("%s%s/%d", prefix, k, i))}, publisher.WithOrderingKey(k)))
		}
	}
	for _, r := range results {
		_, err := r.Get(ctx)
		require.NoError(t, err)
	}
	require.NoError(t, p.Close(ctx))
}

func keyNames(n int) []string {
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("key-%d", i)
	}
	return keys
}

// closing starts e.sub's Close and returns once a push is answered 503,
// with the channel that gets Close's result. Its probe has no token: the
// door answers 503 once closed, before it looks at the token, and 401
// until then, so that a probe that comes before Close runs no handler (a
// probe with a token did, and a test that counts the handler's calls saw
// one more: TestPushClose in a CI run).
func (e pushEnv) closing(t *testing.T) <-chan error {
	t.Helper()
	closed := make(chan error, 1)
	go func() { closed <- e.sub.Close(testContext(t)) }()
	require.NoError(t, poll(testContext(t), func() bool {
		code := e.post(t, http.MethodPost, "", pushBody(t, e.sub.Name(), "m-late", "other", "x"))
		require.Contains(t, []int{http.StatusUnauthorized, http.StatusServiceUnavailable}, code)
		return code == http.StatusServiceUnavailable
	}), "a push after Close is answered 503")
	return closed
}

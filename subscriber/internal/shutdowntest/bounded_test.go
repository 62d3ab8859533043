package shutdowntest_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"cloud.google.com/go/pubsub/v2"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/keyorder/keyorder/internal/harness"
	"github.com/keyorder/keyorder/internal/leaktest"
	"github.com/keyorder/keyorder/ordering/orderingtest"
	"github.com/keyorder/keyorder/publisher"
	"github.com/keyorder/keyorder/subscriber"
	"github.com/keyorder/keyorder/subscriber/internal/controllog"
)

func TestMain(m *testing.M) { leaktest.VerifyTestMain(m) }

const testTimeout = 30 * time.Second

func testContext(t testing.TB) context.Context { return harness.Context(t, testTimeout) }

// outageDrain is the drain timeout of these tests: short, so that a
// shutdown that waits for the server instead of its bound shows.
const outageDrain = 500 * time.Millisecond

// slack is what a loaded test machine may add to a bound.
const slack = 500 * time.Millisecond

// officialRetryMax is the longest wait between the official client's
// tries to open a StreamingPull (apiv1's retry settings): on a server
// that is gone, the goroutine that retries sleeps up to that before it
// sees that its Receive ended (one slept 23 s in a CI run).
const officialRetryMax = 60 * time.Second

// lingerBound is how long goroutines may outlive a shutdown that stopped
// waiting for them: a publish to the control log or the parking topic
// that the server does not answer gives up after controllog.PublishTimeout,
// and the official client's pull stream retries after officialRetryMax
// at most; a loaded machine adds to either.
const lingerBound = max(controllog.PublishTimeout, officialRetryMax) + 10*time.Second

// pusher is the service account the push subscription signs as.
const pusher = "pusher@keyorder-test.iam.gserviceaccount.com"

var errInjected = errors.New("injected handler failure")

var seq atomic.Int64

// outageEnv is a parking subscription on a fake server. s reaches it
// through a link that the test can hang or cut; client reaches the
// server directly, for the test's own publishing and checks.
type outageEnv struct {
	srv    *orderingtest.Server
	client *pubsub.Client
	topic  string
	link   *orderingtest.Link
	s      *subscriber.Subscription
}

// newOutageEnv creates the topic and subscription, with opts and
// parking, and opens it again through a link, as a process would.
func newOutageEnv(t *testing.T, opts ...subscriber.Option) outageEnv {
	t.Helper()
	srv, client := harness.Fake(t)
	n := seq.Add(1)
	opts = append([]subscriber.Option{
		subscriber.WithParking(fmt.Sprintf("parked-%d", n)), subscriber.WithParkingWait(outageDrain / 5), subscriber.WithDrainTimeout(outageDrain),
		subscriber.WithBackoff(time.Millisecond, 2*time.Millisecond),
	}, opts...)
	direct, err := subscriber.CreateWithTopic(testContext(t), client, fmt.Sprintf("topic-%d", n), fmt.Sprintf("sub-%d", n), opts...)
	require.NoError(t, err)
	link := orderingtest.StartLink(t, srv.Addr)
	s, err := subscriber.Open(testContext(t), harness.Client(t, link.Addr), direct.Name(), opts...)
	require.NoError(t, err)
	return outageEnv{srv: srv, client: client, topic: direct.Topic(), link: link, s: s}
}

// publishSeqs publishes "key/from" .. "key/to" in order, directly, and
// waits for them.
func publishSeqs(t *testing.T, client *pubsub.Client, topic, key string, from, to int) {
	t.Helper()
	ctx := testContext(t)
	p, err := publisher.New(client, topic)
	require.NoError(t, err)
	var results []*publisher.Result
	for i := from; i <= to; i++ {
		results = append(results, p.Publish(ctx, &publisher.Message{Data: []byte(fmt.Sprintf("%s/%d", key, i))}, publisher.WithOrderingKey(key)))
	}
	for _, r := range results {
		_, err := r.Get(ctx)
		require.NoError(t, err)
	}
	require.NoError(t, p.Close(ctx))
}

func (e outageEnv) publishSeqs(t *testing.T, key string, from, to int) {
	t.Helper()
	publishSeqs(t, e.client, e.topic, key, from, to)
}

// breaks are the ways a test breaks the link: the server hangs, or is
// gone.
var breaks = []struct {
	name  string
	apply func(*orderingtest.Link)
}{
	{"hung", (*orderingtest.Link).Hang},
	{"gone", (*orderingtest.Link).Cut},
}

// receiving runs Receive on e.s with h, and returns a function that ends
// its ctx, checks that it returns within the bound, and returns its
// error.
func (e outageEnv) receiving(t *testing.T, h subscriber.Handler) (stop func() error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	done := make(chan error, 1)
	go func() { done <- e.s.Receive(ctx, h) }()
	return func() error {
		t.Helper()
		return returnsInTime(t, "Receive", cancel, done)
	}
}

// returnsInTime calls end and waits for done, failing t unless it comes
// within outageDrain plus subscriber.ShutdownBound, and slack; it gives
// up at testTimeout.
func returnsInTime(t *testing.T, what string, end func(), done <-chan error) error {
	t.Helper()
	bound := outageDrain + subscriber.ShutdownBound
	began := time.Now()
	end()
	select {
	case err := <-done:
		took := time.Since(began)
		t.Logf("%s returned %v after its ctx ended", what, took)
		assert.LessOrEqual(t, took, bound+slack, "%s returned %v after its ctx ended: over the drain timeout plus ShutdownBound, %v", what, took, bound)
		return err
	case <-time.After(testTimeout):
		t.Fatalf("%s did not return %v after its ctx ended", what, testTimeout)
		return nil
	}
}

// TestShutdownBounded: at each stage of a parking Receive, and at a push
// endpoint's Close, the server hangs or is gone; Receive returns within
// the drain timeout plus ShutdownBound once its ctx ends, and Close
// within that of its call. Then the official client's goroutines that
// outlived it end on their own.
//
// It does not run in parallel with other tests, which would hide the
// goroutines it checks for; its cases run in parallel with each other.
func TestShutdownBounded(t *testing.T) {
	before := goleak.IgnoreCurrent()
	stages := []struct {
		name string
		run  func(*testing.T, func(*orderingtest.Link))
	}{
		{"catching up", boundedCatchingUp},
		{"catching up, its subscription made", boundedCatchingUpLate},
		{"receiving", boundedReceiving},
		{"receiving, exactly once", boundedExactlyOnce},
		{"parking", boundedParking},
		{"releasing", boundedReleasing},
		{"push close", boundedPushClose},
	}
	t.Run("stages", func(t *testing.T) {
		for _, st := range stages {
			for _, b := range breaks {
				t.Run(st.name+"/"+b.name, func(t *testing.T) {
					t.Parallel()
					st.run(t, b.apply)
				})
			}
		}
	})
	leaktest.Await(t, lingerBound, before)
}

// boundedCatchingUp: the server fails before Receive has caught up with
// the control log; Receive returns ctx's end, having run nothing.
func boundedCatchingUp(t *testing.T, fail func(*orderingtest.Link)) {
	e := newOutageEnv(t)
	fail(e.link)
	ran := make(chan struct{}, 1)
	stop := e.receiving(t, signal(ran))
	time.Sleep(100 * time.Millisecond) // Receive is catching up, or trying to: nothing to wait on
	err := stop()
	assert.True(t, err == nil || errors.Is(err, context.Canceled), "Receive: %v", err)
	assert.Empty(t, ran, "nothing ran before Receive caught up")
}

// boundedCatchingUpLate: the server fails once Receive has made its
// subscription on the control topic, while its marker, which tells it
// has caught up, is on its way: it must delete the subscription, which
// the server does not answer.
func boundedCatchingUpLate(t *testing.T, fail func(*orderingtest.Link)) {
	e := newOutageEnv(t)
	held := e.srv.HoldPublish(orderingtest.AnyMessage)
	t.Cleanup(held.Remove)
	stop := e.receiving(t, signal(nil))
	require.NoError(t, held.Wait(testContext(t), 1), "the marker is published")
	fail(e.link)
	err := stop()
	assert.True(t, err == nil || errors.Is(err, context.Canceled), "Receive: %v", err)
}

// boundedReceiving: the server fails while handlers run and messages are
// outstanding.
func boundedReceiving(t *testing.T, fail func(*orderingtest.Link)) {
	e := newOutageEnv(t)
	for _, k := range []string{"a", "b", "c", "d"} {
		e.publishSeqs(t, k, 1, 5)
	}
	ran := make(chan struct{}, 1)
	stop := e.receiving(t, signal(ran))
	awaitSignal(t, ran, "a handler ran")
	fail(e.link)
	require.NoError(t, stop())
}

// boundedExactlyOnce: as boundedReceiving, on an exactly-once
// subscription, whose acks wait for the server's answers.
func boundedExactlyOnce(t *testing.T, fail func(*orderingtest.Link)) {
	e := newOutageEnv(t, subscriber.WithExactlyOnceDelivery())
	e.publishSeqs(t, "a", 1, 5)
	ran := make(chan struct{}, 1)
	stop := e.receiving(t, signal(ran))
	awaitSignal(t, ran, "a handler ran")
	fail(e.link)
	require.NoError(t, stop())
}

// boundedParking: a message fails for good and its key parks; the server
// fails while its copy is on its way to the parking topic.
func boundedParking(t *testing.T, fail func(*orderingtest.Link)) {
	e := newOutageEnv(t, subscriber.WithMaxAttempts(1))
	e.publishSeqs(t, "key-0", 1, 3)
	held := e.srv.HoldPublish(orderingtest.Data("key-0/1"))
	t.Cleanup(held.Remove)
	stop := e.receiving(t, func(context.Context, *subscriber.Delivery) error { return errInjected })
	require.NoError(t, held.Wait(testContext(t), 1), "the copy to the parking topic is published")
	fail(e.link)
	require.NoError(t, stop())
}

// boundedReleasing: a release runs in the Receive, its handler call
// under way, when the server fails.
func boundedReleasing(t *testing.T, fail func(*orderingtest.Link)) {
	e := newOutageEnv(t, subscriber.WithMaxAttempts(1))
	e.publishSeqs(t, "key-0", 1, 3)
	var fixed, inRelease = make(chan struct{}), make(chan struct{}, 1)
	stop := e.receiving(t, func(ctx context.Context, d *subscriber.Delivery) error {
		select {
		case <-fixed:
		default:
			return errInjected
		}
		select {
		case inRelease <- struct{}{}:
		default:
		}
		<-ctx.Done() // until the drain timeout
		return ctx.Err()
	})
	e.awaitParkedThrough(t, e.s, "key-0", 3)
	close(fixed)
	released := make(chan error, 1)
	go func() { released <- e.s.Release(context.Background(), "key-0") }()
	awaitSignal(t, inRelease, "the release ran a message")
	fail(e.link)
	require.NoError(t, stop())
	select {
	case err := <-released:
		assert.Error(t, err, "a release cut short by the shutdown says so")
	case <-time.After(testTimeout):
		t.Fatal("Release did not return once Receive had")
	}
}

// awaitParkedThrough waits until s lists key parked with n messages.
func (e outageEnv) awaitParkedThrough(t *testing.T, s *subscriber.Subscription, key string, n int) {
	t.Helper()
	ctx := testContext(t)
	require.NoError(t, e.srv.WaitFor(ctx, func() bool {
		list, err := s.Parked(ctx)
		return err == nil && len(list) == 1 && list[0].Key == key && list[0].Messages == n
	}), "%s never had %d messages parked", key, n)
}

// boundedPushClose: a push endpoint with parking, its control log up,
// is closed once the server has failed.
func boundedPushClose(t *testing.T, fail func(*orderingtest.Link)) {
	srv, client := harness.Fake(t)
	mux := http.NewServeMux()
	web := httptest.NewServer(mux)
	t.Cleanup(web.Close)
	validator, err := srv.TokenValidator(testContext(t))
	require.NoError(t, err)
	n := seq.Add(1)
	opts := []subscriber.Option{
		subscriber.WithPush(web.URL + "/push"), subscriber.WithPushAuth(pusher, ""), subscriber.WithTokenValidator(validator),
		subscriber.WithParking(fmt.Sprintf("parked-%d", n)), subscriber.WithParkingWait(outageDrain / 5), subscriber.WithDrainTimeout(outageDrain),
	}
	direct, err := subscriber.CreateWithTopic(testContext(t), client, fmt.Sprintf("topic-%d", n), fmt.Sprintf("sub-%d", n), opts...)
	require.NoError(t, err)
	link := orderingtest.StartLink(t, srv.Addr)
	s, err := subscriber.Open(testContext(t), harness.Client(t, link.Addr), direct.Name(), opts...)
	require.NoError(t, err)
	ran := make(chan struct{}, 1)
	mux.Handle("/push", s.PushHandler(signal(ran)))
	publishSeqs(t, client, direct.Topic(), "k", 1, 1)
	awaitSignal(t, ran, "a push ran, so the control log is up")
	fail(link)
	done := make(chan error, 1)
	require.NoError(t, returnsInTime(t, "Close", func() { go func() { done <- s.Close(context.Background()) }() }, done))
}

// signal returns a handler that succeeds and signals ch, if it has room;
// ch may be nil.
func signal(ch chan struct{}) subscriber.Handler {
	return func(context.Context, *subscriber.Delivery) error {
		select {
		case ch <- struct{}{}:
		default:
		}
		return nil
	}
}

// awaitSignal waits for ch, failing t after testTimeout.
func awaitSignal(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(testTimeout):
		t.Fatalf("timed out waiting: %s", what)
	}
}

package publisher_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"cloud.google.com/go/pubsub/v2"
	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"cloud.google.com/go/pubsub/v2/pstest"
	"github.com/stretchr/testify/require"
	"google.golang.org/api/option"

	"github.com/keyorder/keyorder/internal/harness"
	"github.com/keyorder/keyorder/internal/leaktest"
	"github.com/keyorder/keyorder/ordering/orderingtest"
	"github.com/keyorder/keyorder/publisher"
)

func TestMain(m *testing.M) { leaktest.VerifyTestMain(m) }

// testTimeout bounds every wait in this package's tests.
const testTimeout = 20 * time.Second

func testContext(t testing.TB) context.Context { return harness.Context(t, testTimeout) }

// reactor adapts a function to pstest.Reactor. pstest runs reactors with
// its server-wide mutex held: a reactor that blocks stalls every RPC.
type reactor func(req any) (handled bool, ret any, err error)

func (r reactor) React(req any) (bool, any, error) { return r(req) }

// onPublish installs f as a reactor of pstest's Publish RPC.
func onPublish(f func(*pubsubpb.PublishRequest) (*pubsubpb.PublishResponse, error)) pstest.ServerReactorOption {
	return pstest.ServerReactorOption{FuncName: "Publish", Reactor: reactor(func(req any) (bool, any, error) {
		resp, err := f(req.(*pubsubpb.PublishRequest))
		return resp != nil || err != nil, resp, err
	})}
}

// discardPublishes answers every Publish with fresh IDs without storing
// anything, so that memory and time measure the client, not the server.
// publishRPCs counts the Publish requests discardPublishes answered, for
// the benchmarks' msgs/rpc.
var publishRPCs atomic.Int64

func discardPublishes() pstest.ServerReactorOption {
	var next atomic.Int64
	return onPublish(func(req *pubsubpb.PublishRequest) (*pubsubpb.PublishResponse, error) {
		publishRPCs.Add(1)
		ids := make([]string, len(req.Messages))
		for i := range ids {
			ids[i] = fmt.Sprint(next.Add(1))
		}
		return &pubsubpb.PublishResponse{MessageIds: ids}, nil
	})
}

var topicSeq atomic.Int64

// newTopic creates a topic with a fresh name and returns its ID.
func newTopic(t testing.TB, c *pubsub.Client) string {
	t.Helper()
	id := fmt.Sprintf("topic-%d", topicSeq.Add(1))
	_, err := c.TopicAdminClient.CreateTopic(testContext(t), &pubsubpb.Topic{
		Name: fmt.Sprintf("projects/%s/topics/%s", c.Project(), id),
	})
	require.NoError(t, err)
	return id
}

// env is a pstest server, a client and a topic for one test.
type env struct {
	srv    *pstest.Server
	client *pubsub.Client
	topic  string
}

func newEnv(t testing.TB, reactors ...pstest.ServerReactorOption) env {
	t.Helper()
	srv, client := harness.Pstest(t, reactors...)
	return env{srv: srv, client: client, topic: newTopic(t, client)}
}

// newEnvWithClientOptions is newEnv with options for the client, such as
// interceptors.
func newEnvWithClientOptions(t testing.TB, copts []option.ClientOption, reactors ...pstest.ServerReactorOption) env {
	t.Helper()
	srv := pstest.NewServer(reactors...)
	t.Cleanup(func() { _ = srv.Close() })
	client := harness.Client(t, srv.Addr, copts...)
	return env{srv: srv, client: client, topic: newTopic(t, client)}
}

// newPublisher returns a publisher on e's topic that is closed, and
// checked to close cleanly, when the test ends.
func (e env) newPublisher(t testing.TB, opts ...publisher.Option) *publisher.Publisher {
	t.Helper()
	p, err := publisher.New(e.client, e.topic, opts...)
	require.NoError(t, err)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
		defer cancel()
		require.NoError(t, p.Close(ctx))
	})
	return p
}

// stored returns what the server holds for e's topic, in publish order.
func (e env) stored() []*pstest.Message {
	var out []*pstest.Message
	for _, m := range e.srv.Messages() {
		if m.Topic == "projects/"+harness.Project+"/topics/"+e.topic {
			out = append(out, m)
		}
	}
	return out
}

// storedData returns the data of the stored messages with ordering key
// key, in publish order.
func (e env) storedData(key string) []string {
	var out []string
	for _, m := range e.stored() {
		if m.OrderingKey == key {
			out = append(out, string(m.Data))
		}
	}
	return out
}

// storedOrder runs what the server holds for e's topic through the order
// checker, in publish order: seq gives a message's sequence in its key,
// from 1, and each of keys is expected to hold perKey messages.
func (e env) storedOrder(keys []string, perKey int, seq func(data string) int) orderingtest.Report {
	c := orderingtest.NewChecker()
	for _, k := range keys {
		c.Expect(k, perKey)
	}
	for _, m := range e.stored() {
		c.Record(m.OrderingKey, seq(string(m.Data)))
	}
	return c.Report()
}

// keyNames returns n ordering keys: format applied to 0..n-1.
func keyNames(n int, format string) []string {
	names := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprintf(format, i)
	}
	return names
}

// settings returns the default publish settings with batches of n messages.
func settings(n int) pubsub.PublishSettings {
	s := pubsub.DefaultPublishSettings
	s.CountThreshold = n
	s.DelayThreshold = time.Millisecond
	return s
}

// newHoldingEnv returns an env whose server holds every Publish RPC until
// release is opened; held receives a value as each RPC arrives, and has
// room for n of them.
func newHoldingEnv(t testing.TB, n int) (e env, held <-chan struct{}, release *gate) {
	t.Helper()
	arrived := make(chan struct{}, n)
	release = newGate()
	e = newEnv(t, onPublish(func(*pubsubpb.PublishRequest) (*pubsubpb.PublishResponse, error) {
		arrived <- struct{}{}
		<-release.ch
		return nil, nil
	}))
	t.Cleanup(release.open) // never leave the server stuck
	return e, arrived, release
}

// gate blocks callers of wait until open is called; open is idempotent.
type gate struct {
	once sync.Once
	ch   chan struct{}
}

func newGate() *gate  { return &gate{ch: make(chan struct{})} }
func (g *gate) open() { g.once.Do(func() { close(g.ch) }) }

package publisher_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"cloud.google.com/go/pubsub/v2"
	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/api/option"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/keyorder/keyorder/internal/harness"
	"github.com/keyorder/keyorder/ordering/orderingtest"
	"github.com/keyorder/keyorder/publisher"
)

// A sent request, as the client sent it.
type sent struct {
	keys       []string // each message's ordering key
	compressed bool     // sent with the gzip compressor
}

// requestLog records the Publish requests a client sends, through an
// interceptor.
type requestLog struct {
	mu   sync.Mutex
	reqs []sent
}

func (l *requestLog) option() option.ClientOption {
	return option.WithGRPCDialOption(grpc.WithUnaryInterceptor(func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		if pr, ok := req.(*pubsubpb.PublishRequest); ok {
			s := sent{}
			for _, m := range pr.Messages {
				s.keys = append(s.keys, m.OrderingKey)
			}
			for _, o := range opts {
				if c, ok := o.(grpc.CompressorCallOption); ok && c.CompressorType == "gzip" {
					s.compressed = true
				}
			}
			l.mu.Lock()
			l.reqs = append(l.reqs, s)
			l.mu.Unlock()
		}
		return invoker(ctx, method, req, reply, cc, opts...)
	}))
}

func (l *requestLog) requests() []sent {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]sent(nil), l.reqs...)
}

// sizes returns the number of messages of each request of key.
func (l *requestLog) sizes(key string) []int {
	var out []int
	for _, s := range l.requests() {
		if len(s.keys) > 0 && s.keys[0] == key {
			out = append(out, len(s.keys))
		}
	}
	return out
}

// newLoggedFakeEnv is newFakeEnv with a log of the requests its client
// sends.
func newLoggedFakeEnv(t *testing.T, opts ...orderingtest.Option) (fakeEnv, *requestLog) {
	t.Helper()
	log := &requestLog{}
	srv := orderingtest.Start(t, opts...)
	client := harness.Client(t, srv.Addr, log.option())
	return fakeEnv{srv: srv, client: client, topic: newTopic(t, client)}, log
}

// TestHotKeyGoesInFullRequests checks that a key's messages published
// while its request is in flight go out together when it returns, up to
// the service's 1,000 messages a request, not in batches of the official
// client's 100, and in order (P3).
func TestHotKeyGoesInFullRequests(t *testing.T) {
	t.Parallel()
	e, log := newLoggedFakeEnv(t)
	ctx := testContext(t)
	hold := e.srv.HoldPublish(orderingtest.Data("hot-0"))
	p := e.newPublisher(t, []*orderingtest.Fault{hold})

	const n = 2501
	results := []*publisher.Result{p.Publish(ctx, &publisher.Message{Data: []byte("hot-0")}, publisher.WithOrderingKey("hot"))}
	require.NoError(t, hold.Wait(ctx, 1))
	want := []string{"hot-0"}
	for i := 1; i < n; i++ {
		want = append(want, fmt.Sprint("hot-", i))
		results = append(results, p.Publish(ctx, &publisher.Message{Data: []byte(want[i])}, publisher.WithOrderingKey("hot")))
	}
	hold.Remove()
	for i, r := range results {
		_, err := r.Get(ctx)
		require.NoError(t, err, "message %d", i)
	}
	assert.Equal(t, want, e.storedData("hot"))
	assert.Equal(t, []int{1, 1000, 1000, 500}, log.sizes("hot"), "the first message alone, then the rest in full requests")
}

// TestOneKeyPerRequest checks that no request mixes ordering keys, which
// the service refuses, whatever keys and unordered messages are published
// together, and that a burst's key goes in few requests: its first
// message lingers for the rest.
func TestOneKeyPerRequest(t *testing.T) {
	t.Parallel()
	e, log := newLoggedFakeEnv(t)
	ctx := testContext(t)
	p := e.newPublisher(t, nil)

	var results []*publisher.Result
	for i := range 400 {
		key := []string{"a", "b", "c", ""}[i%4]
		results = append(results, p.Publish(ctx, &publisher.Message{Data: []byte(fmt.Sprint(i))}, publisher.WithOrderingKey(key)))
	}
	for i, r := range results {
		_, err := r.Get(ctx)
		require.NoError(t, err, "message %d", i)
	}
	msgs := 0
	for _, s := range log.requests() {
		for _, k := range s.keys {
			require.Equal(t, s.keys[0], k, "a request mixes keys: %v", s.keys)
		}
		msgs += len(s.keys)
	}
	assert.Equal(t, 400, msgs)
	assert.Less(t, len(log.requests()), 400/2, "a burst's keys are batched")
}

// TestInFlightBound checks that NumGoroutines bounds the requests in
// flight: with more keys ready than it allows, the client has exactly
// that many requests out at once, and the others go as they return.
func TestInFlightBound(t *testing.T) {
	t.Parallel()
	const bound, keys = 3, 12
	var mu sync.Mutex
	inFlight, most := 0, 0
	count := option.WithGRPCDialOption(grpc.WithUnaryInterceptor(func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		if _, ok := req.(*pubsubpb.PublishRequest); ok {
			mu.Lock()
			inFlight++
			most = max(most, inFlight)
			mu.Unlock()
			defer func() {
				mu.Lock()
				inFlight--
				mu.Unlock()
			}()
		}
		return invoker(ctx, method, req, reply, cc, opts...)
	}))
	srv := orderingtest.Start(t)
	client := harness.Client(t, srv.Addr, count)
	e := fakeEnv{srv: srv, client: client, topic: newTopic(t, client)}
	ctx := testContext(t)
	hold := srv.HoldPublish(func(*pubsubpb.PubsubMessage) bool { return true })
	s := pubsub.DefaultPublishSettings
	s.NumGoroutines = bound
	p := e.newPublisher(t, []*orderingtest.Fault{hold}, publisher.WithPublishSettings(s))

	var results []*publisher.Result
	for k := range keys {
		results = append(results, p.Publish(ctx, &publisher.Message{Data: []byte("x")}, publisher.WithOrderingKey(fmt.Sprint("k", k))))
	}
	require.NoError(t, hold.Wait(ctx, bound))
	hold.Remove()
	for i, r := range results {
		_, err := r.Get(ctx)
		require.NoError(t, err, "message %d", i)
	}
	mu.Lock()
	defer mu.Unlock()
	assert.Equal(t, bound, most, "requests in flight at once")
}

// TestRequestRetries checks the retries the official client makes: a
// transient failure (Unavailable) is retried within the request, so the
// message is published; Internal "invalid UTF-8", which the service would
// answer again, is not, and fails the message at once.
func TestRequestRetries(t *testing.T) {
	t.Parallel()
	e := newFakeEnv(t)
	ctx := testContext(t)
	p := e.newPublisher(t, nil)
	flaky := e.srv.FailPublish(orderingtest.Data("flaky"), codes.Unavailable, 1)
	_, err := p.Publish(ctx, &publisher.Message{Data: []byte("flaky")}, publisher.WithOrderingKey("k")).Get(ctx)
	require.NoError(t, err, "Unavailable is retried")
	assert.Equal(t, 1, flaky.Hits())
	assert.Equal(t, []string{"flaky"}, e.storedData("k"))

	var calls int
	var mu sync.Mutex
	pe := newEnv(t, onPublish(func(*pubsubpb.PublishRequest) (*pubsubpb.PublishResponse, error) {
		mu.Lock()
		defer mu.Unlock()
		calls++
		return nil, status.Error(codes.Internal, "grpc: error unmarshalling request: string field contains invalid UTF-8")
	}))
	q := pe.newPublisher(t)
	_, err = q.Publish(ctx, &publisher.Message{Data: []byte("x")}, publisher.WithOrderingKey("k")).Get(ctx)
	require.Equal(t, codes.Internal, status.Code(errorsCause(err)), "%v", err)
	mu.Lock()
	defer mu.Unlock()
	assert.Equal(t, 1, calls, "invalid UTF-8 is not retried")
}

// errorsCause returns the cause of a *PublishError.
func errorsCause(err error) error {
	var pe *publisher.PublishError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

// TestRequestTimeout checks that the publish Timeout bounds a request: a
// request the server never answers fails with DeadlineExceeded, which is
// retryable.
func TestRequestTimeout(t *testing.T) {
	t.Parallel()
	e := newFakeEnv(t)
	ctx := testContext(t)
	hold := e.srv.HoldPublish(orderingtest.Data("stuck"))
	s := pubsub.DefaultPublishSettings
	s.Timeout = 300 * time.Millisecond
	p := e.newPublisher(t, []*orderingtest.Fault{hold}, publisher.WithPublishSettings(s))
	_, err := p.Publish(ctx, &publisher.Message{Data: []byte("stuck")}, publisher.WithOrderingKey("k")).Get(ctx)
	require.Error(t, err)
	cause := errorsCause(err)
	assert.True(t, errors.Is(cause, context.DeadlineExceeded) || status.Code(cause) == codes.DeadlineExceeded, "%v", err)
	assert.True(t, publisher.Retryable(err))
}

// TestCompression checks WithPublishSettings' compression: a request
// whose messages are above CompressionBytesThreshold goes compressed,
// one below it does not, and without EnableCompression none does.
func TestCompression(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	for _, enabled := range []bool{true, false} {
		e, log := newLoggedFakeEnv(t)
		s := pubsub.DefaultPublishSettings
		s.EnableCompression = enabled
		s.CompressionBytesThreshold = 1000
		p := e.newPublisher(t, nil, publisher.WithPublishSettings(s))
		for _, data := range []string{"small", strings.Repeat("big", 1000)} {
			_, err := p.Publish(ctx, &publisher.Message{Data: []byte(data)}, publisher.WithOrderingKey(data[:3])).Get(ctx)
			require.NoError(t, err)
		}
		reqs := log.requests()
		require.Len(t, reqs, 2)
		assert.False(t, reqs[0].compressed, "below the threshold")
		assert.Equal(t, enabled, reqs[1].compressed, "above the threshold, enabled %v", enabled)
	}
}

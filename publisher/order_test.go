package publisher_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/api/option"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/keyorder/keyorder/ordering"
	"github.com/keyorder/keyorder/publisher"
)

// concurrency counts Publish RPCs in flight, per ordering key and in all,
// from a client-side interceptor.
type concurrency struct {
	mu       sync.Mutex
	inFlight map[string]int
	maxKey   map[string]int
	total    int
	maxTotal int
	mixed    int           // requests carrying more than one ordering key
	overlap  chan struct{} // closed once two RPCs are in flight together
	once     sync.Once
}

func newConcurrency() *concurrency {
	return &concurrency{inFlight: map[string]int{}, maxKey: map[string]int{}, overlap: make(chan struct{})}
}

// interceptor counts Publish RPCs. The first RPC waits, up to a deadline,
// until a second one is in flight too, so that parallelism across keys is
// proven rather than left to chance; a publisher that sends one RPC at a
// time makes it wait in vain, and maxTotal stays 1.
func (c *concurrency) interceptor() option.ClientOption {
	return option.WithGRPCDialOption(grpc.WithUnaryInterceptor(func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		preq, ok := req.(*pubsubpb.PublishRequest)
		if !ok {
			return invoker(ctx, method, req, reply, cc, opts...)
		}
		key := preq.Messages[0].OrderingKey
		c.mu.Lock()
		for _, m := range preq.Messages {
			if m.OrderingKey != key {
				c.mixed++
				break
			}
		}
		c.inFlight[key]++
		c.maxKey[key] = max(c.maxKey[key], c.inFlight[key])
		c.total++
		c.maxTotal = max(c.maxTotal, c.total)
		first := c.maxTotal == 1
		if c.total >= 2 {
			c.once.Do(func() { close(c.overlap) })
		}
		c.mu.Unlock()
		if first {
			select {
			case <-c.overlap:
			case <-time.After(5 * time.Second):
			}
		}
		err := invoker(ctx, method, req, reply, cc, opts...)
		c.mu.Lock()
		c.inFlight[key]--
		c.total--
		c.mu.Unlock()
		return err
	}))
}

// TestOneBatchInFlightPerKey checks P3 with a slowed server: at most one
// Publish RPC per key at a time, and more than one across keys; unordered
// messages go in parallel too.
func TestOneBatchInFlightPerKey(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		keys []string
	}{
		{"ordered keys", []string{"a", "b", "c", "d", "e", "f"}},
		{"unordered", []string{""}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := newConcurrency()
			slow := onPublish(func(*pubsubpb.PublishRequest) (*pubsubpb.PublishResponse, error) {
				time.Sleep(2 * time.Millisecond) // the server's work, not synchronisation
				return nil, nil
			})
			e := newEnvWithClientOptions(t, []option.ClientOption{c.interceptor()}, slow)
			ctx := testContext(t)
			p := e.newPublisher(t, publisher.WithPublishSettings(settings(2)))

			var results []*publisher.Result
			for i := 0; i < 30; i++ {
				for _, k := range tc.keys {
					results = append(results, p.Publish(ctx, &publisher.Message{Data: []byte(fmt.Sprint(i))}, publisher.WithOrderingKey(k)))
				}
			}
			for _, r := range results {
				_, err := r.Get(ctx)
				require.NoError(t, err)
			}
			c.mu.Lock()
			defer c.mu.Unlock()
			assert.Zero(t, c.mixed, "requests mixing ordering keys")
			assert.Greater(t, c.maxTotal, 1, "RPCs never overlapped")
			for _, k := range tc.keys {
				if k == "" {
					assert.Greater(t, c.maxKey[k], 1, "unordered messages were sent one RPC at a time")
				} else {
					assert.Equal(t, 1, c.maxKey[k], "key %q had %d RPCs in flight", k, c.maxKey[k])
				}
			}
		})
	}
}

// TestFailedTailAndAutoResume is the scenario of P4 and P5: the RPC carrying
// K-2 is held by the server while K-3..K-7 queue up behind it, then fails
// with a code the client does not retry. K-2 fails, its tail fails with it
// in the same moment, other keys are unaffected, and the next message of K
// is published without anyone calling ResumePublish.
func TestFailedTailAndAutoResume(t *testing.T) {
	t.Parallel()
	held := make(chan struct{}, 1)
	release := newGate()
	e := newEnv(t, onPublish(func(req *pubsubpb.PublishRequest) (*pubsubpb.PublishResponse, error) {
		if string(req.Messages[0].Data) == "K-2" {
			held <- struct{}{}
			<-release.ch
			return nil, status.Error(codes.FailedPrecondition, "injected failure of K-2")
		}
		return nil, nil
	}))
	t.Cleanup(release.open) // never leave the server stuck
	ctx := testContext(t)
	p := e.newPublisher(t, publisher.WithPublishSettings(settings(1)))
	pub := func(key string, i int) *publisher.Result {
		return p.Publish(ctx, &publisher.Message{Data: []byte(fmt.Sprintf("%s-%d", key, i))}, publisher.WithOrderingKey(key))
	}

	for i := 0; i < 2; i++ {
		_, err := pub("K", i).Get(ctx)
		require.NoError(t, err)
	}
	failing := pub("K", 2)
	select {
	case <-held:
	case <-ctx.Done():
		t.Fatal("K-2 never reached the server")
	}
	var tail []*publisher.Result
	for i := 3; i < 8; i++ {
		tail = append(tail, pub("K", i))
	}
	// Another key, published while K-2 is held; pstest serialises RPCs,
	// so these go through once K-2 is answered.
	var others []*publisher.Result
	for i := 0; i < 5; i++ {
		others = append(others, pub("L", i))
	}
	release.open()

	_, err := failing.Get(ctx)
	var pe *publisher.PublishError
	require.True(t, errors.As(err, &pe), "got %v", err)
	assert.Equal(t, "K", pe.Key)
	assert.False(t, pe.Skipped)
	assert.Equal(t, codes.FailedPrecondition, status.Code(err), "the cause is reachable through Unwrap")
	assert.Contains(t, err.Error(), `"K"`)
	assert.Contains(t, err.Error(), "injected failure of K-2")

	// P4: the tail was reported with the failure, not after it.
	for i, r := range tail {
		select {
		case <-r.Ready():
		default:
			t.Fatalf("K-%d: not ready when K-2's failure was reported", i+3)
		}
		_, err := r.Get(ctx)
		var te *publisher.PublishError
		require.True(t, errors.As(err, &te), "K-%d: got %v", i+3, err)
		assert.Equal(t, "K", te.Key)
		assert.True(t, te.Skipped, "K-%d", i+3)
		assert.Equal(t, codes.FailedPrecondition, status.Code(err))
	}

	// P5: published after the failure was reported, so sent normally,
	// while the tail may still be draining inside the official client.
	var after []*publisher.Result
	for i := 8; i < 12; i++ {
		after = append(after, pub("K", i))
	}
	for i, r := range append(after, others...) {
		_, err := r.Get(ctx)
		require.NoError(t, err, "result %d", i)
	}

	assert.Equal(t, []string{"K-0", "K-1", "K-8", "K-9", "K-10", "K-11"}, e.storedData("K"))
	assert.Equal(t, []string{"L-0", "L-1", "L-2", "L-3", "L-4"}, e.storedData("L"))
}

// TestFailuresUnderLoad publishes many keys while the server rejects chosen
// messages, and checks P4 and P5 message by message. For each Publish call
// it notes which earlier results of its key were ready just before and
// just after the call; results of a key become ready in order, so a count
// says it all.
func TestFailuresUnderLoad(t *testing.T) {
	t.Parallel()
	const keys, perKey = 16, 60
	rejected := func(data string) bool {
		var k, i int
		_, _ = fmt.Sscanf(data, "k%d-%d", &k, &i)
		return (i*7+k)%13 == 5
	}
	e := newEnv(t, onPublish(func(req *pubsubpb.PublishRequest) (*pubsubpb.PublishResponse, error) {
		for _, m := range req.Messages {
			if rejected(string(m.Data)) {
				return nil, status.Errorf(codes.FailedPrecondition, "rejected %s", m.Data)
			}
		}
		return nil, nil
	}))
	ctx := testContext(t)
	p := e.newPublisher(t, publisher.WithPublishSettings(settings(1)))

	type call struct {
		res           *publisher.Result
		before, after int // ready results of the key before and after Publish
		data          string
	}
	calls := make([][]call, keys)
	var wg sync.WaitGroup
	for k := 0; k < keys; k++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ready := 0
			advance := func() int {
				for ready < len(calls[k]) && isReady(calls[k][ready].res) {
					ready++
				}
				return ready
			}
			for i := 0; i < perKey; i++ {
				c := call{data: fmt.Sprintf("k%d-%d", k, i), before: advance()}
				c.res = p.Publish(ctx, &publisher.Message{Data: []byte(c.data)}, publisher.WithOrderingKey(fmt.Sprint(k)))
				calls[k] = append(calls[k], c)
				c.after = advance()
				calls[k][i].after = min(c.after, i) // its own result does not count
				if i%4 == 3 {
					<-c.res.Ready() // let failures be reported between calls
				}
			}
		}()
	}
	wg.Wait()

	names := keyNames(keys, "%d")
	stored := e.storedOrder(names, perKey, func(data string) int {
		var k, i int
		_, _ = fmt.Sscanf(data, "k%d-%d", &k, &i)
		return i + 1
	})
	roots, skipped := 0, 0
	for k := 0; k < keys; k++ {
		var failed []int  // sequences of the key's failed messages
		rootAt := []int{} // indexes of root failures
		for i, c := range calls[k] {
			_, err := c.res.Get(ctx)
			if err != nil {
				failed = append(failed, i+1)
			}
			var pe *publisher.PublishError
			switch {
			case err == nil:
				assert.False(t, rejected(c.data), "%s was rejected but reported published", c.data)
			case errors.As(err, &pe) && !pe.Skipped:
				roots++
				rootAt = append(rootAt, i)
				assert.True(t, rejected(c.data), "%s failed without being rejected: %v", c.data, err)
			case errors.As(err, &pe) && pe.Skipped:
				skipped++
				// P5: a skip needs an earlier failure that was not yet
				// reported when this call started.
				justified := false
				for _, r := range rootAt {
					if c.before <= r {
						justified = true
					}
				}
				assert.True(t, justified, "%s skipped, though every earlier failure was reported before it was published", c.data)
				assert.Contains(t, pe.Err.Error(), "rejected k", c.data)
			default:
				t.Fatalf("%s: unexpected error %v", c.data, err)
			}
		}
		// P4: every call that returned before a failure was reported
		// fails with it.
		for _, r := range rootAt {
			for j := r + 1; j < len(calls[k]); j++ {
				if calls[k][j].after <= r {
					_, err := calls[k][j].res.Get(ctx)
					assert.Error(t, err, "%s published before %s's failure was reported, yet succeeded", calls[k][j].data, calls[k][r].data)
				}
			}
		}
		// The server holds exactly the messages reported published, in
		// publish order: the failed ones are its only gaps.
		kr, _ := stored.Key(names[k])
		assert.Empty(t, kr.OutOfOrder, "key %d on the server: out of order", k)
		assert.Empty(t, kr.Duplicates, "key %d on the server: duplicates", k)
		assert.Empty(t, kr.Unexpected, "key %d on the server: unexpected", k)
		assert.ElementsMatch(t, failed, kr.Missing, "key %d on the server: the gaps are the failed messages", k)
	}
	t.Logf("%d root failures, %d skipped tail messages", roots, skipped)
	assert.Greater(t, roots, keys, "the test should exercise failures")
	assert.Greater(t, skipped, 0, "the test should exercise tails")
}

func isReady(r *publisher.Result) bool {
	select {
	case <-r.Ready():
		return true
	default:
		return false
	}
}

// TestErrorMessages pins the wording users see.
func TestErrorMessages(t *testing.T) {
	t.Parallel()
	cause := errors.New("boom")
	assert.Equal(t, `keyorder/publisher: publish failed on ordering key "k": boom`, (&publisher.PublishError{Key: "k", Err: cause}).Error())
	assert.Equal(t, `keyorder/publisher: failed with an earlier message of ordering key "k": boom`, (&publisher.PublishError{Key: "k", Err: cause, Skipped: true}).Error())
	assert.Equal(t, `keyorder/publisher: publish failed: boom`, (&publisher.PublishError{Err: cause}).Error())
	ve := &publisher.ValidationError{Key: "k", Err: publisher.ErrEmptyMessage}
	assert.Equal(t, `keyorder/publisher: invalid message (ordering key "k"): message has neither data nor attributes`, ve.Error())
	ve = &publisher.ValidationError{Key: "k", Err: publisher.ErrAttributeKeyTooLong, Detail: "key \"x\""}
	assert.Equal(t, `keyorder/publisher: invalid message (ordering key "k"): attribute key too long: key "x"`, ve.Error())
	ve = &publisher.ValidationError{Key: "k", Err: ordering.ErrKeyNotUTF8}
	assert.Equal(t, `keyorder/publisher: invalid message (ordering key "k"): ordering key is not valid UTF-8`, ve.Error())
}

// TestSentinelsArePrefixed checks that every sentinel error names the
// package once, as do the errors that wrap one.
func TestSentinelsArePrefixed(t *testing.T) {
	t.Parallel()
	const prefix = "keyorder/publisher: "
	sentinels := []error{
		publisher.ErrClosed, publisher.ErrInvalidConfig, publisher.ErrNotRetryable,
		publisher.ErrNilMessage, publisher.ErrEmptyMessage, publisher.ErrMessageTooLarge,
		publisher.ErrTooManyAttributes, publisher.ErrAttributeKeyTooLong, publisher.ErrAttributeValueTooLong,
		publisher.ErrReservedAttribute, publisher.ErrAttributeNotUTF8, publisher.ErrStampAttribute,
	}
	for _, err := range sentinels {
		assert.True(t, strings.HasPrefix(err.Error(), prefix), "%q", err)
		assert.Equal(t, 1, strings.Count(err.Error(), "keyorder/"), "%q", err)
	}

	// Errors that wrap them, from New, Publish and Retry.
	e := newEnv(t)
	ctx := testContext(t)
	_, err := publisher.New(e.client, "t")
	require.ErrorIs(t, err, publisher.ErrInvalidConfig)
	wrapped := []error{err}
	_, err = publisher.New(e.client, e.topic, publisher.WithProducerID(""))
	require.ErrorIs(t, err, publisher.ErrInvalidConfig)
	wrapped = append(wrapped, err)
	p := e.newPublisher(t)
	_, err = p.Publish(ctx, &publisher.Message{Data: []byte("x"), Headers: map[string]string{"goog-x": "1"}}).Get(ctx)
	require.ErrorIs(t, err, publisher.ErrReservedAttribute)
	wrapped = append(wrapped, err)
	ok := p.Publish(ctx, &publisher.Message{Data: []byte("x")})
	_, err = ok.Get(ctx)
	require.NoError(t, err)
	_, err = p.Retry(ctx, ok)
	require.ErrorIs(t, err, publisher.ErrNotRetryable)
	wrapped = append(wrapped, err)
	for _, err := range wrapped {
		assert.True(t, strings.HasPrefix(err.Error(), prefix), "%q", err)
		assert.Equal(t, 1, strings.Count(err.Error(), "keyorder/"), "%q", err)
	}
}

package publisher_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"cloud.google.com/go/pubsub/v2"
	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/keyorder/keyorder/publisher"
)

// slowBatches holds messages in the official client's batches for an hour
// unless something flushes them.
func slowBatches(n int) pubsub.PublishSettings {
	s := pubsub.DefaultPublishSettings
	s.CountThreshold = n
	s.DelayThreshold = time.Hour
	return s
}

func TestPublishAfterClose(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := testContext(t)
	p, err := publisher.New(e.client, e.topic)
	require.NoError(t, err)
	require.NoError(t, p.Close(ctx))
	require.NoError(t, p.Close(ctx), "Close is idempotent")

	for _, key := range []string{"", "k"} {
		_, err = p.Publish(ctx, &publisher.Message{Data: []byte("late")}, publisher.WithOrderingKey(key)).Get(ctx)
		assert.ErrorIs(t, err, publisher.ErrClosed)
	}
	assert.Empty(t, e.stored())
}

// drains are the two calls that send what the official client is still
// batching and wait for every result: Close, and Flush, which leaves the
// publisher open.
var drains = []struct {
	name string
	call func(*publisher.Publisher, context.Context) error
}{
	{"Close", (*publisher.Publisher).Close},
	{"Flush", (*publisher.Publisher).Flush},
}

// TestDrainSends checks that Close and Flush send what the official client
// is still batching, rather than waiting for its delay threshold, and
// return once every result is ready: without flow control, where an
// unordered message goes straight to the official client, and with it,
// where unordered messages pass through keyorder's gate too.
func TestDrainSends(t *testing.T) {
	t.Parallel()
	flowControlled := slowBatches(100)
	flowControlled.FlowControlSettings = pubsub.FlowControlSettings{MaxOutstandingMessages: 100, LimitExceededBehavior: pubsub.FlowControlBlock}
	for _, drain := range drains {
		for _, fc := range []struct {
			name     string
			settings pubsub.PublishSettings
		}{{"no flow control", slowBatches(100)}, {"flow control", flowControlled}} {
			t.Run(drain.name+"/"+fc.name, func(t *testing.T) {
				t.Parallel()
				e := newEnv(t)
				ctx := testContext(t)
				p, err := publisher.New(e.client, e.topic, publisher.WithPublishSettings(fc.settings))
				require.NoError(t, err)

				var results []*publisher.Result
				for i := 0; i < 10; i++ {
					results = append(results, p.Publish(ctx, &publisher.Message{Data: []byte(fmt.Sprint(i))}, publisher.WithOrderingKey(fmt.Sprint(i%3))))
				}
				results = append(results, p.Publish(ctx, &publisher.Message{Data: []byte("unordered")}))
				require.NoError(t, drain.call(p, ctx))
				for i, r := range results {
					require.True(t, isReady(r), "result %d not ready after %s", i, drain.name)
					_, err := r.Get(ctx)
					require.NoError(t, err)
				}
				assert.Len(t, e.stored(), 11)
				require.NoError(t, p.Close(ctx))
			})
		}
	}
}

// TestFlushLeavesPublisherOpen checks that Flush can be called again and
// again, and that Publish works after it.
func TestFlushLeavesPublisherOpen(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := testContext(t)
	p, err := publisher.New(e.client, e.topic, publisher.WithPublishSettings(slowBatches(100)))
	require.NoError(t, err)
	require.NoError(t, p.Flush(ctx), "Flush with nothing published")
	for round := 0; round < 3; round++ {
		r := p.Publish(ctx, &publisher.Message{Data: []byte(fmt.Sprint(round))}, publisher.WithOrderingKey("k"))
		require.NoError(t, p.Flush(ctx))
		require.True(t, isReady(r), "round %d", round)
	}
	assert.Equal(t, []string{"0", "1", "2"}, e.storedData("k"))
	require.NoError(t, p.Close(ctx))
	require.NoError(t, p.Flush(ctx), "Flush after Close waits for the shutdown")
}

// TestFlushWithADoneContextSendsAtOnce holds a key's linger for an hour
// and the server's answer until released: Flush with a context already
// done sends the key at once and returns the context's error without
// waiting for the answer, which then settles the message.
func TestFlushWithADoneContextSendsAtOnce(t *testing.T) {
	t.Parallel()
	e, held, release := newHoldingEnv(t, 1)
	ctx := testContext(t)
	p, err := publisher.New(e.client, e.topic)
	require.NoError(t, err)
	publisher.HoldLingers(p, time.Hour)

	res := p.Publish(ctx, &publisher.Message{Data: []byte("x")}, publisher.WithOrderingKey("k"))
	done, cancel := context.WithCancel(ctx)
	cancel()
	require.ErrorIs(t, p.Flush(done), context.Canceled)
	select {
	case <-held: // the request reached the server, an hour before its linger would have ended
	case <-ctx.Done():
		t.Fatal("Flush with a done context did not send the lingering key")
	}
	require.False(t, isReady(res), "the server has not answered yet")

	release.open()
	_, err = res.Get(ctx)
	require.NoError(t, err)
	require.NoError(t, p.Close(ctx))
}

// TestDrainIsBoundedByContext holds the server, so Close or Flush cannot
// finish: each returns the context's error, and a later call waits for the
// end.
func TestDrainIsBoundedByContext(t *testing.T) {
	t.Parallel()
	for _, drain := range drains {
		t.Run(drain.name, func(t *testing.T) {
			t.Parallel()
			e, held, release := newHoldingEnv(t, 1)
			ctx := testContext(t)
			p, err := publisher.New(e.client, e.topic, publisher.WithPublishSettings(slowBatches(100)))
			require.NoError(t, err)

			res := p.Publish(ctx, &publisher.Message{Data: []byte("x")}, publisher.WithOrderingKey("k"))
			short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
			defer cancel()
			require.ErrorIs(t, drain.call(p, short), context.DeadlineExceeded)
			<-held // the call sent the batch, which waits an hour otherwise
			require.False(t, isReady(res))

			release.open()
			require.NoError(t, drain.call(p, ctx))
			require.True(t, isReady(res))
			_, err = res.Get(ctx)
			require.NoError(t, err)
			require.NoError(t, p.Close(ctx))
		})
	}
}

// TestDrainSendsHeldMessages covers a key that is recovering from a
// failure while Close or Flush runs: the message held behind the failed
// tail is sent during the call, even though batches otherwise wait an hour.
func TestDrainSendsHeldMessages(t *testing.T) {
	t.Parallel()
	for _, drain := range drains {
		t.Run(drain.name, func(t *testing.T) {
			t.Parallel()
			// K-0's request answers only once K-2 is published, so that
			// all three are in its failure, however slow the machine.
			queued := make(chan struct{})
			e := newEnv(t, onPublish(func(req *pubsubpb.PublishRequest) (*pubsubpb.PublishResponse, error) {
				if string(req.Messages[0].Data) == "K-0" {
					<-queued
					return nil, status.Error(codes.FailedPrecondition, "injected")
				}
				return nil, nil
			}))
			ctx := testContext(t)
			p, err := publisher.New(e.client, e.topic, publisher.WithPublishSettings(slowBatches(2)))
			require.NoError(t, err)
			pub := func(i int) *publisher.Result {
				return p.Publish(ctx, &publisher.Message{Data: []byte(fmt.Sprintf("K-%d", i))}, publisher.WithOrderingKey("K"))
			}

			// K-0 and K-1 fill a batch, which fails; K-2 waits alone in
			// the next batch, for an hour, and fails with the tail at once.
			first, second, tail := pub(0), pub(1), pub(2)
			close(queued)
			for _, r := range []*publisher.Result{first, second, tail} {
				_, err := r.Get(ctx)
				require.Error(t, err)
			}
			// Published after the failure was reported: held until K-2
			// has drained out of the official client.
			held := pub(3)
			require.False(t, isReady(held))

			require.NoError(t, drain.call(p, ctx))
			require.True(t, isReady(held))
			_, err = held.Get(ctx)
			require.NoError(t, err)
			assert.Equal(t, []string{"K-3"}, e.storedData("K"))
			require.NoError(t, p.Close(ctx))
		})
	}
}

// TestConcurrentPublishAndClose races publishers against Close: every
// result must be ready once Close returns, and each message is either
// published or refused with ErrClosed.
func TestConcurrentPublishAndClose(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := testContext(t)
	p, err := publisher.New(e.client, e.topic, publisher.WithPublishSettings(settings(5)))
	require.NoError(t, err)

	const goroutines, each = 8, 100
	var (
		mu      sync.Mutex
		results []*publisher.Result
		wg      sync.WaitGroup
		started = make(chan struct{}, goroutines)
	)
	for g := 0; g < goroutines; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			started <- struct{}{}
			for i := 0; i < each; i++ {
				r := p.Publish(ctx, &publisher.Message{Data: []byte(fmt.Sprint(i))}, publisher.WithOrderingKey(fmt.Sprint(g%3)))
				mu.Lock()
				results = append(results, r)
				mu.Unlock()
			}
		}()
	}
	for g := 0; g < goroutines; g++ {
		<-started
	}
	require.NoError(t, p.Close(ctx))
	wg.Wait()

	published := 0
	for _, r := range results {
		require.True(t, isReady(r))
		_, err := r.Get(ctx)
		if err == nil {
			published++
			continue
		}
		require.True(t, errors.Is(err, publisher.ErrClosed), "unexpected %v", err)
	}
	assert.Len(t, e.stored(), published)
}

package subscriber_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/keyorder/keyorder/ordering/orderingtest"
	"github.com/keyorder/keyorder/publisher"
	"github.com/keyorder/keyorder/subscriber"
)

// parkEnv is a fakeEnv whose subscription parks keys.
type parkEnv struct {
	fakeEnv
	parkTopic string // full name
}

func newParkEnv(t *testing.T, fopts []orderingtest.Option, sopts ...subscriber.Option) parkEnv {
	t.Helper()
	topic, _ := names()
	park := "parked-" + topic
	e := newFakeEnv(t, fopts, append([]subscriber.Option{subscriber.WithParking(park), fast}, sopts...)...)
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

func (e parkEnv) debug() string {
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

// TestParkingPoisonMidKey: key-2's fourth message is poison. The key's
// first three messages run; the poison message and the six after it are
// parked, in order, with their key and the documented attributes, and
// acked; every other key finishes; Parked lists the key, from the running
// Receive and from a replay of the log once it has stopped.
func TestParkingPoisonMidKey(t *testing.T) {
	t.Parallel()
	keys := keyNames(5)
	const perKey = 10
	e := newParkEnv(t, nil, subscriber.WithWorkers(4), subscriber.WithMaxAttempts(3))
	e.publish(t, keys, perKey)
	tr := newTracker(append(keyNames(2), keys[3:]...), perKey)
	tr.expect("key-2", 3)
	var during []subscriber.ParkedKey
	tr.receiveUntil(t, e.sub, tr.handler(func(_ context.Context, d *subscriber.Delivery) error {
		if string(d.Data) == "key-2/4" {
			return fmt.Errorf("poison: %w", errInjected)
		}
		return nil
	}), func(ctx context.Context) error {
		if err := e.srv.WaitFor(ctx, func() bool {
			return len(e.srv.Messages(e.parkTopic)) == 7 && e.srv.Stats(e.sub.Name()).Outstanding == 0
		}); err != nil {
			return err
		}
		var err error
		during, err = e.sub.Parked(ctx)
		return err
	})
	assert.Equal(t, 3, tr.callsOf("key-2/4"), "the poison message had its attempts")
	assert.Zero(t, tr.callsOf("key-2/5"), "nothing after it ran")

	// The parked copies, in order, with their key and attributes.
	parked := e.srv.Messages(e.parkTopic)
	require.Equal(t, seqs("key-2", 4, 10), e.parkedData())
	originals := map[string]orderingtest.Message{}
	for _, m := range e.srv.Messages(e.topic) {
		originals[string(m.Data)] = m
	}
	for i, m := range parked {
		orig := originals[string(m.Data)]
		assert.Equal(t, "key-2", m.OrderingKey)
		assert.Equal(t, orig.ID, m.Attributes[subscriber.AttrMessageID])
		assert.Equal(t, e.sub.Name(), m.Attributes[subscriber.AttrSubscription])
		assert.Equal(t, orig.PublishTime.UTC().Format(time.RFC3339Nano), m.Attributes[subscriber.AttrPublishTime])
		assert.NotEmpty(t, m.Attributes[subscriber.AttrParkID])
		assert.Equal(t, parked[0].Attributes[subscriber.AttrParkID], m.Attributes[subscriber.AttrParkID], "one park")
		assert.NotContains(t, m.Attributes, "partition-key", "the key is the ordering key (P2)")
		if i == 0 {
			assert.Equal(t, "3", m.Attributes[subscriber.AttrAttempts])
			assert.Equal(t, "poison: "+errInjected.Error(), m.Attributes[subscriber.AttrError])
		} else {
			assert.Equal(t, "0", m.Attributes[subscriber.AttrAttempts])
			assert.NotContains(t, m.Attributes, subscriber.AttrError)
		}
	}
	st := e.sub.Stats()
	assert.Equal(t, int64(7), st.Parked)
	assert.Zero(t, st.Failed, "nothing was nacked as failed")
	assert.Zero(t, e.srv.Stats(e.sub.Name()).Nacked, "nothing of the key went back to the service")

	after, err := e.sub.Parked(testContext(t))
	require.NoError(t, err)
	for _, list := range [][]subscriber.ParkedKey{during, after} {
		require.Len(t, list, 1)
		k := list[0]
		assert.Equal(t, "key-2", k.Key)
		assert.Equal(t, 7, k.Messages)
		assert.Equal(t, originals["key-2/4"].ID, k.MessageID)
		assert.Equal(t, "poison: "+errInjected.Error(), k.LastError)
		assert.False(t, k.Releasing)
		assert.WithinDuration(t, time.Now(), k.Since, testTimeout)
	}
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

// awaitParked waits until the running Receive of e lists key parked with n
// messages.
func (e parkEnv) awaitParked(t *testing.T, key string, n int) subscriber.ParkedKey {
	t.Helper()
	ctx := testContext(t)
	var got subscriber.ParkedKey
	require.NoError(t, e.srv.WaitFor(ctx, func() bool {
		list, err := e.sub.Parked(ctx)
		if err != nil {
			return false
		}
		for _, k := range list {
			if k.Key == key && k.Messages == n {
				got = k
				return true
			}
		}
		return false
	}), "%s never had %d messages parked: %v", key, n, e.debug())
	return got
}

// TestReleaseAfterTheFix: key-1 parks at its fourth message; five more of
// its messages are published and parked behind it. Once the handler is
// fixed, Release runs the seven parked messages, once each, in order, and
// the key's later messages run after them. The tracker sees every message
// of every key exactly once, in publish order.
func TestReleaseAfterTheFix(t *testing.T) {
	t.Parallel()
	keys := keyNames(3)
	const perKey = 10
	e := newParkEnv(t, nil, subscriber.WithWorkers(2), subscriber.WithMaxAttempts(2))
	e.publish(t, keys, perKey)
	tr := newTracker([]string{"key-0", "key-2"}, perKey)
	tr.expect("key-1", 20)
	var broken atomic.Bool
	broken.Store(true)
	stop := start(t, e.sub, tr.handler(func(_ context.Context, d *subscriber.Delivery) error {
		if string(d.Data) == "key-1/4" && broken.Load() {
			return subscriber.Permanent(errInjected)
		}
		return nil
	}))
	e.awaitParked(t, "key-1", 7)
	e.publishSeqs(t, "key-1", 11, 15)
	e.awaitParked(t, "key-1", 12)
	assert.Equal(t, 3, tr.processed("key-1"))
	assert.Equal(t, 1, tr.callsOf("key-1/4"), "a permanent error parks at once")

	broken.Store(false)
	require.NoError(t, e.sub.Release(testContext(t), "key-1"))
	assert.Equal(t, 15, tr.processed("key-1"), "Release returns once the parked messages ran")
	list, err := e.sub.Parked(testContext(t))
	require.NoError(t, err)
	assert.Empty(t, list)
	require.ErrorIs(t, e.sub.Release(testContext(t), "key-1"), subscriber.ErrNotParked)

	e.publishSeqs(t, "key-1", 16, 20)
	select {
	case <-tr.done:
	case <-time.After(testTimeout):
		t.Fatalf("key-1 has %d processed", tr.processed("key-1"))
	}
	stop()
	tr.verify(t)
	st := e.sub.Stats()
	assert.Equal(t, int64(12), st.Parked)
	assert.Equal(t, int64(12), st.Released)
}

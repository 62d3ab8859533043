package subscriber_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"cloud.google.com/go/pubsub/v2"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/keyorder/keyorder/internal/harness"
	"github.com/keyorder/keyorder/internal/metrictest"
	"github.com/keyorder/keyorder/ordering"
	"github.com/keyorder/keyorder/ordering/orderingtest"
	"github.com/keyorder/keyorder/subscriber"
)

// stampKey is the key the tests' honest producers sign with, and
// otherKey one the subscriber does not know.
var (
	stampKey = []byte("0123456789abcdef0123456789abcdef")
	otherKey = []byte("fedcba9876543210fedcba9876543210")
)

// signedMsg is one message to publish, with its stamp signed by key, or
// unsigned when key is nil.
type signedMsg struct {
	key, data string
	stamp     ordering.Stamp
	signWith  []byte
}

// publishSigned publishes msgs in order through the official client with
// message ordering, each stamped, and signed as it says, as a producer
// that signs its stamps would; it fails the test on a publish error.
func publishSigned(t *testing.T, client *pubsub.Client, topic string, msgs []signedMsg) {
	t.Helper()
	ctx := testContext(t)
	p := client.Publisher(topic)
	p.EnableMessageOrdering = true
	defer p.Stop()
	results := make([]*pubsub.PublishResult, len(msgs))
	for i, m := range msgs {
		attrs := map[string]string{}
		m.stamp.Put(attrs)
		if m.signWith != nil {
			k, err := ordering.NewStampKeys(m.signWith)
			require.NoError(t, err)
			k.Sign(attrs, m.key, m.stamp, []byte(m.data))
		}
		results[i] = p.Publish(ctx, &pubsub.Message{Data: []byte(m.data), OrderingKey: m.key, Attributes: attrs})
	}
	for _, r := range results {
		_, err := r.Get(ctx)
		require.NoError(t, err)
	}
}

// TestStampKeyRefusesBadKeys: no key, or one too short to sign with, is
// refused when the subscription is made.
func TestStampKeyRefusesBadKeys(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		keys [][]byte
	}{
		{"no key", nil},
		{"short key", [][]byte{[]byte("short")}},
		{"one short key of two", [][]byte{stampKey, make([]byte, ordering.MinStampKeyBytes-1)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, client := harness.Fake(t)
			topic, sub := names()
			_, err := subscriber.CreateWithTopic(testContext(t), client, topic, sub, subscriber.WithStampKey(tc.keys...))
			require.ErrorIs(t, err, subscriber.ErrInvalidConfig)
			assert.ErrorIs(t, err, ordering.ErrBadStampKey)
		})
	}
}

// forgeries are what whoever may publish to the topic can send without
// the key: a real producer's ID with a number far ahead, and with the
// producer's next epoch. Taken on trust, either makes p's real messages
// 1, 2, 3 copies.
func forgeries(key string, signWith []byte) []signedMsg {
	return []signedMsg{
		{key, "forged high", ordering.Stamp{Producer: "p", Seq: 100}, signWith},
		{key, "forged epoch", ordering.Stamp{Producer: "p", Seq: ordering.MakeSeq(1, 1)}, signWith},
	}
}

func honest(key string, from, to int) []signedMsg {
	var out []signedMsg
	for i := from; i <= to; i++ {
		out = append(out, signedMsg{key, fmt.Sprintf("%s/%d", key, i), ordering.Stamp{Producer: "p", Seq: uint64(i)}, stampKey})
	}
	return out
}

// TestForgedStampsChangeNothing: with WithStampKey, a forged stamp, unsigned
// or signed with another key, is no stamp: it runs as an unstamped
// message, counted in Stats.Unverified and logged at Warn once per
// producer and key, and p's real messages 1, 2, 3 all run, as stamped.
func TestForgedStampsChangeNothing(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		signWith []byte
	}{
		{"unsigned", nil},
		{"signed with another key", otherKey},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var logs metrictest.Log
			e := newFakeEnv(t, nil, subscriber.WithStampKey(otherKeyIfNot(tc.signWith), stampKey), subscriber.WithLogger(logs.Logger()))
			publishSigned(t, e.client, e.topic, append(forgeries("k", tc.signWith), honest("k", 1, 3)...))
			c := newStampCalls()
			receiveN(t, e.sub, c, 5, func(d *subscriber.Delivery) {
				if d.Seq == 0 {
					assert.Empty(t, d.Producer, "%s", d.Data)
					assert.NotContains(t, d.Headers, ordering.StampAttribute, "%s", d.Data)
					assert.NotContains(t, d.Headers, ordering.SignatureAttribute, "%s", d.Data)
				}
			})
			assert.Equal(t, []string{"/forged high#0", "/forged epoch#0", "p/k/1#1", "p/k/2#2", "p/k/3#3"}, c.snapshot())
			st := e.sub.Stats()
			assert.EqualValues(t, 2, st.Unverified)
			assert.Zero(t, st.Duplicates)
			assert.Zero(t, st.Gaps+st.UncertainGaps, "the real sequence starts at 1")
			recs := records(t, &logs, e.sub.Name())
			assert.Equal(t, 1, count(recs, "WARN", "keyorder/subscriber: stamp signature not verified; message run as unstamped"), "once for (p, k): %v", recs)
		})
	}
}

// otherKeyIfNot returns a second key for the subscriber that is not the
// forger's: a subscriber that holds two keys, as in a rotation, still
// refuses a third.
func otherKeyIfNot(forger []byte) []byte {
	if forger == nil {
		return otherKeyFor
	}
	return []byte("rotated-out-key-rotated-out-key!")
}

var otherKeyFor = []byte("another-valid-key-another-valid!")

// TestForgedStampsWithoutKeys documents the risk that stays without
// WithStampKey (DESIGN.md, Security model): stamps are trusted as
// written, so the same forgeries make p's real messages copies, acked
// unrun.
func TestForgedStampsWithoutKeys(t *testing.T) {
	t.Parallel()
	e := newFakeEnv(t, nil)
	publishSigned(t, e.client, e.topic, append(forgeries("k", nil), honest("k", 1, 3)...))
	c := newStampCalls()
	stop := start(t, e.sub, func(_ context.Context, d *subscriber.Delivery) error { c.add(d); return nil })
	e.waitStats(t, "all acked", func(s orderingtest.Stats) bool { return s.Acked == 5 })
	stop()
	assert.Equal(t, []string{"p/forged high#100", fmt.Sprintf("p/forged epoch#%d", ordering.MakeSeq(1, 1))}, c.snapshot())
	assert.EqualValues(t, 3, e.sub.Stats().Duplicates, "the real 1, 2, 3, acked unrun")
}

// TestSignedStampsAreKeptWithoutKeys: a signed stamp reads as any stamp
// on a subscriber without keys, and its signature leaves Headers with it.
func TestSignedStampsAreKeptWithoutKeys(t *testing.T) {
	t.Parallel()
	e := newFakeEnv(t, nil)
	publishSigned(t, e.client, e.topic, honest("k", 1, 2))
	c := newStampCalls()
	receiveN(t, e.sub, c, 2, func(d *subscriber.Delivery) {
		assert.NotContains(t, d.Headers, ordering.SignatureAttribute)
	})
	assert.Equal(t, []string{"p/k/1#1", "p/k/2#2"}, c.snapshot())
	assert.Zero(t, e.sub.Stats().Unverified)
}

// TestParkedStampKeepsItsSignature: a parked copy carries its original's
// signature, so that the release, which verifies it again, runs it as
// stamped: its number counts as processed, and the producer's next
// message is no gap. Without the signature the release would take the
// copy for unstamped.
func TestParkedStampKeepsItsSignature(t *testing.T) {
	t.Parallel()
	gaps := make(chan subscriber.Gap, 10)
	e := newParkEnv(t, nil, subscriber.WithStampKey(stampKey), subscriber.WithGapHandler(func(g subscriber.Gap) { gaps <- g }))
	var broken atomic.Bool
	broken.Store(true)
	var (
		mu   sync.Mutex
		seen []string
	)
	done := make(chan struct{})
	stop := start(t, e.sub, func(_ context.Context, d *subscriber.Delivery) error {
		if string(d.Data) == "k/2" && broken.Load() {
			return subscriber.Permanent(errInjected)
		}
		mu.Lock()
		defer mu.Unlock()
		seen = append(seen, fmt.Sprintf("%s/%s#%d", d.Producer, d.Data, d.Seq))
		if len(seen) == 4 {
			close(done)
		}
		return nil
	})
	publishSigned(t, e.client, e.topic, honest("k", 1, 3))
	e.awaitParked(t, "k", 2)
	broken.Store(false)
	require.NoError(t, e.sub.Release(testContext(t), "k"))
	publishSigned(t, e.client, e.topic, honest("k", 4, 4))
	select {
	case <-done:
	case <-time.After(testTimeout):
		t.Fatalf("not all ran: %s", e.describe())
	}
	stop()
	mu.Lock()
	defer mu.Unlock()
	assert.Equal(t, []string{"p/k/1#1", "p/k/2#2", "p/k/3#3", "p/k/4#4"}, seen)
	assert.Zero(t, e.sub.Stats().Unverified)
	assert.Empty(t, gaps)
}

// stampCalls records handler calls as "producer/data#seq", in order.
type stampCalls struct {
	mu   sync.Mutex
	list []string
	ch   chan struct{} // signalled after every call
}

func newStampCalls() *stampCalls { return &stampCalls{ch: make(chan struct{}, 1)} }

func (c *stampCalls) add(d *subscriber.Delivery) {
	c.mu.Lock()
	c.list = append(c.list, fmt.Sprintf("%s/%s#%d", d.Producer, d.Data, d.Seq))
	c.mu.Unlock()
	select {
	case c.ch <- struct{}{}:
	default:
	}
}

func (c *stampCalls) snapshot() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.list...)
}

// receiveN runs Receive on s, recording each call in c after look has
// seen it, until c holds n calls.
func receiveN(t *testing.T, s *subscriber.Subscription, c *stampCalls, n int, look func(d *subscriber.Delivery)) {
	t.Helper()
	stop := start(t, s, func(_ context.Context, d *subscriber.Delivery) error {
		look(d)
		c.add(d)
		return nil
	})
	deadline := time.After(testTimeout)
	for len(c.snapshot()) < n {
		select {
		case <-c.ch:
		case <-deadline:
			// The Receive's stats say whether the server sent nothing
			// or the Receive held what it got (one CI run: no call).
			t.Fatalf("gave up after calls %v; stats %+v", c.snapshot(), s.Stats())
		}
	}
	stop()
}

// TestForgedStampsOnPush: the push endpoint verifies as Receive does.
func TestForgedStampsOnPush(t *testing.T) {
	t.Parallel()
	c := newStampCalls()
	e := newPushEnv(t, func(_ context.Context, d *subscriber.Delivery) error { c.add(d); return nil }, subscriber.WithStampKey(stampKey))
	publishSigned(t, e.client, e.topic, append(forgeries("k", otherKey), honest("k", 1, 3)...))
	deadline := time.After(testTimeout)
	for len(c.snapshot()) < 5 {
		select {
		case <-c.ch:
		case <-deadline:
			t.Fatalf("gave up after calls %v", c.snapshot())
		}
	}
	assert.Equal(t, []string{"/forged high#0", "/forged epoch#0", "p/k/1#1", "p/k/2#2", "p/k/3#3"}, c.snapshot())
	assert.EqualValues(t, 2, e.sub.Stats().Unverified)
	assert.Zero(t, e.sub.Stats().Duplicates)
}

// TestForgedStampsOnReplay: Replay, which runs Receive's path with
// Receive's options, verifies as Receive does.
func TestForgedStampsOnReplay(t *testing.T) {
	t.Parallel()
	e := newReplayEnv(t, time.Hour)
	publishSigned(t, e.client, e.topic, append(forgeries("k", nil), honest("k", 1, 3)...))
	c := newStampCalls()
	err := await(t, e.replay(testContext(t), time.Time{}, func(_ context.Context, d *subscriber.Delivery) error {
		c.add(d)
		return nil
	}, subscriber.WithStampKey(stampKey), subscriber.WithQuietPeriod(200*time.Millisecond)))
	require.NoError(t, err)
	assert.Equal(t, []string{"/forged high#0", "/forged epoch#0", "p/k/1#1", "p/k/2#2", "p/k/3#3"}, c.snapshot())
}

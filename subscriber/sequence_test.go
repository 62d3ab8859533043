package subscriber_test

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"cloud.google.com/go/pubsub/v2"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"

	"github.com/keyorder/keyorder/internal/harness"
	"github.com/keyorder/keyorder/ordering"
	"github.com/keyorder/keyorder/ordering/orderingtest"
	"github.com/keyorder/keyorder/subscriber"
)

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

// sequence returns perKey messages for each key, interleaved, with data
// "key/i" and stamp i of producer, except for the keys in two, whose odd
// messages producer stamps and even ones producer+"-b", each in its own
// sequence.
func sequence(keys []string, perKey int, producer string, two map[string]bool) []stamped {
	var msgs []stamped
	for i := 1; i <= perKey; i++ {
		for _, k := range keys {
			st := ordering.Stamp{Producer: producer, Seq: uint64(i)}
			if two[k] {
				st = ordering.Stamp{Producer: producer, Seq: uint64(i+1) / 2}
				if i%2 == 0 {
					st.Producer += "-b"
				}
			}
			msgs = append(msgs, stamped{key: k, data: fmt.Sprintf("%s/%d", k, i), stamp: st})
		}
	}
	return msgs
}

// TestDuplicateWithNewMessageID checks that a message the server stored
// twice, under two message IDs, because the official publisher retried a
// request whose response was lost, runs its handler once: S6's ID window
// cannot see the copy, the stamp does.
func TestDuplicateWithNewMessageID(t *testing.T) {
	t.Parallel()
	keys := keyNames(4)
	const perKey = 20
	var (
		mu   sync.Mutex
		gaps []subscriber.Gap
	)
	e := newFakeEnv(t, nil, subscriber.WithGapHandler(func(g subscriber.Gap) {
		mu.Lock()
		defer mu.Unlock()
		gaps = append(gaps, g)
	}))
	lost := []*orderingtest.Fault{
		e.srv.LosePublishResponses(orderingtest.Data("key-1/5"), codes.Unavailable, 1),
		e.srv.LosePublishResponses(orderingtest.Data("key-3/12"), codes.Unavailable, 1),
	}
	for _, err := range publishStamped(t, e.client, e.topic, sequence(keys, perKey, "p-1", map[string]bool{"key-3": true})) {
		require.NoError(t, err, "the official client retries Unavailable")
	}
	for _, f := range lost {
		require.Equal(t, 1, f.Hits())
	}
	stored := len(e.srv.Messages(e.topic))
	copies := stored - len(keys)*perKey
	require.Positive(t, copies, "the retried requests were stored twice")
	ids := map[string]bool{}
	for _, m := range e.srv.Messages(e.topic) {
		ids[m.ID] = true
	}
	require.Len(t, ids, stored, "every copy has a message ID of its own")

	tr := newTracker(keys, perKey)
	tr.receiveUntil(t, e.sub, tr.handler(func(context.Context, *subscriber.Delivery) error { return nil }),
		e.settled(func(st orderingtest.Stats) bool { return st.Acked >= stored }))
	st := e.sub.Stats()
	assert.EqualValues(t, copies, st.Duplicates)
	assert.EqualValues(t, copies, st.Deduplicated, "a duplicate is counted as deduplicated too")
	assert.EqualValues(t, len(keys)*perKey, st.Acked)
	mu.Lock()
	defer mu.Unlock()
	assert.Empty(t, gaps, "interleaved producers of one key keep their own sequences")
}

// TestGapReported checks that a key's failed tail that is never
// republished shows as a gap: the callback names the key, the producer
// and the missing numbers, and the next message is processed as usual.
func TestGapReported(t *testing.T) {
	t.Parallel()
	var (
		mu   sync.Mutex
		gaps []subscriber.Gap
		got  []string
		logs harness.Buffer
	)
	e := newFakeEnv(t, nil, subscriber.WithGapHandler(func(g subscriber.Gap) {
		mu.Lock()
		defer mu.Unlock()
		gaps = append(gaps, g)
	}), subscriber.WithLogger(slog.New(slog.NewTextHandler(&logs, nil))))
	msg := func(i int) stamped {
		return stamped{key: "acct", data: fmt.Sprintf("acct/%d", i), stamp: ordering.Stamp{Producer: "p-1", Seq: uint64(i)}}
	}
	for _, err := range publishStamped(t, e.client, e.topic, []stamped{msg(1), msg(2), msg(3)}) {
		require.NoError(t, err)
	}
	// 4 fails for good, and 5 with it, as its key's tail (P4); neither is
	// republished. 6 and 7 come after the key resumes.
	fail := e.srv.FailPublish(orderingtest.Data("acct/4"), codes.InvalidArgument, 0)
	p := e.client.Publisher(e.topic)
	p.EnableMessageOrdering = true
	ctx := testContext(t)
	for _, i := range []int{4, 5} {
		attrs := map[string]string{}
		msg(i).stamp.Put(attrs)
		_, err := p.Publish(ctx, &pubsub.Message{Data: []byte(msg(i).data), OrderingKey: "acct", Attributes: attrs}).Get(ctx)
		require.Error(t, err, "acct/%d", i)
	}
	p.ResumePublish("acct")
	p.Stop()
	fail.Remove()
	for _, err := range publishStamped(t, e.client, e.topic, []stamped{msg(6), msg(7)}) {
		require.NoError(t, err)
	}

	rctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		done <- e.sub.Receive(rctx, func(_ context.Context, d *subscriber.Delivery) error {
			mu.Lock()
			defer mu.Unlock()
			got = append(got, fmt.Sprintf("%s/%s#%d", d.Producer, d.Data, d.Seq))
			return nil
		})
	}()
	require.NoError(t, e.srv.WaitFor(ctx, func() bool { return e.srv.Stats(e.sub.Name()).Acked == 5 }))
	cancel()
	require.NoError(t, <-done)

	mu.Lock()
	defer mu.Unlock()
	assert.Equal(t, []string{"p-1/acct/1#1", "p-1/acct/2#2", "p-1/acct/3#3", "p-1/acct/6#6", "p-1/acct/7#7"}, got)
	require.Len(t, gaps, 1)
	g := gaps[0]
	assert.Equal(t, subscriber.Gap{Key: "acct", Producer: "p-1", From: 4, To: 5, MessageID: g.MessageID, Seq: 6}, g)
	assert.NotEmpty(t, g.MessageID)
	assert.EqualValues(t, 1, e.sub.Stats().Gaps)
	assert.Equal(t, 1, strings.Count(logs.String(), "sequence gap"), "the gap is logged once: %s", logs.String())
	assert.Contains(t, logs.String(), "first_missing=0.4 last_missing=0.5")
}

// TestSequenceWindowOff checks that WithSequenceWindow(0) turns the checks
// off: a copy under a new ID runs again, and no gap is reported.
func TestSequenceWindowOff(t *testing.T) {
	t.Parallel()
	var gaps sync.Map
	e := newFakeEnv(t, nil, subscriber.WithSequenceWindow(0),
		subscriber.WithGapHandler(func(g subscriber.Gap) { gaps.Store(g.Key, g) }))
	lost := e.srv.LosePublishResponses(orderingtest.Data("k/1"), codes.Unavailable, 1)
	msgs := []stamped{
		{key: "k", data: "k/1", stamp: ordering.Stamp{Producer: "p", Seq: 1}},
		{key: "k", data: "k/3", stamp: ordering.Stamp{Producer: "p", Seq: 3}},
	}
	for _, err := range publishStamped(t, e.client, e.topic, msgs) {
		require.NoError(t, err)
	}
	require.Equal(t, 1, lost.Hits())
	stored := len(e.srv.Messages(e.topic))
	var calls sync.Map
	ctx, cancel := context.WithCancel(testContext(t))
	done := make(chan error, 1)
	go func() {
		done <- e.sub.Receive(ctx, func(_ context.Context, d *subscriber.Delivery) error {
			calls.Store(d.ID, true)
			return nil
		})
	}()
	require.NoError(t, e.srv.WaitFor(ctx, func() bool { return e.srv.Stats(e.sub.Name()).Acked == stored }))
	cancel()
	require.NoError(t, <-done)
	n := 0
	calls.Range(func(any, any) bool { n++; return true })
	assert.Equal(t, stored, n, "every copy ran")
	gaps.Range(func(k, v any) bool { t.Errorf("gap reported with the checks off: %+v", v); return true })
	assert.Zero(t, e.sub.Stats().Duplicates)
}

func TestSequenceWindowInvalid(t *testing.T) {
	t.Parallel()
	_, client := harness.Pstest(t)
	topic, sub := names()
	_, err := subscriber.CreateWithTopic(testContext(t), client, topic, sub, subscriber.WithSequenceWindow(-1))
	require.ErrorIs(t, err, subscriber.ErrInvalidConfig)
}

package publisher_test

import (
	"context"
	"fmt"
	"log/slog"
	"sort"
	"sync"
	"testing"

	"cloud.google.com/go/pubsub/v2"
	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"

	"github.com/keyorder/keyorder/internal/harness"
	"github.com/keyorder/keyorder/internal/metrictest"
	"github.com/keyorder/keyorder/ordering/orderingtest"
	"github.com/keyorder/keyorder/publisher"
)

// topicAttr names the topic in each data point.
const topicAttr = "messaging.destination.name"

// hooked is a slog handler that calls on for each record before passing it
// on: a test can look at the publisher while it logs an event.
type hooked struct {
	slog.Handler
	on func(slog.Record)
}

func (h hooked) Handle(ctx context.Context, r slog.Record) error {
	h.on(r)
	return h.Handler.Handle(ctx, r)
}

func (h hooked) WithAttrs(as []slog.Attr) slog.Handler {
	return hooked{h.Handler.WithAttrs(as), h.on}
}

// TestObservability runs a scripted publish on the ordering-faithful fake,
// with an SDK meter provider and a JSON logger, and checks each instrument
// and log line against what the script did:
//
//   - key K: K-0 and K-1 published; K-2 fails, taking K-3..K-7, queued
//     behind it, with it (P4); K-8 and K-9 published after (P5);
//   - key L: 4 published;
//   - 2 invalid messages, refused by Publish (P6);
//   - 2 unordered messages, one published and one refused by the server:
//     counted, without a time;
//   - 1 Publish after Close: invalid.
func TestObservability(t *testing.T) {
	t.Parallel()
	m := metrictest.NewMeter(t)
	var logs metrictest.Log
	e := newFakeEnv(t)
	ctx := testContext(t)
	topic := "projects/" + harness.Project + "/topics/" + e.topic
	keys := []string{"K", "L"}

	// whilePaused is what the metrics said when the key paused: the gauge
	// is observed while the tail drains, and the failure counted.
	var (
		mu          sync.Mutex
		whilePaused map[string]metrictest.Instrument
		readErr     error
	)
	logger := slog.New(hooked{logs.Handler(), func(r slog.Record) {
		if r.Message == "keyorder/publisher: key paused" {
			mu.Lock()
			defer mu.Unlock()
			whilePaused, readErr = m.Read(topicAttr, topic, keys)
		}
	}})

	hold := e.holdThenFail("K-2", 1)
	p := e.newPublisher(t, []*orderingtest.Fault{hold}, publisher.WithPublishSettings(settings(1)),
		publisher.WithMeterProvider(m), publisher.WithLogger(logger))

	var ok []*publisher.Result
	for i := 0; i < 4; i++ {
		ok = append(ok, p.Publish(ctx, &publisher.Message{Data: []byte(fmt.Sprintf("L-%d", i))}, publisher.WithOrderingKey("L")))
	}
	for i, r := range ok {
		_, err := r.Get(ctx)
		require.NoError(t, err, "L-%d", i)
	}
	_, tail := failTail(t, ctx, e, p, hold)
	for i := 8; i < 10; i++ {
		ok = append(ok, p.Publish(ctx, &publisher.Message{Data: []byte(fmt.Sprintf("K-%d", i))}, publisher.WithOrderingKey("K")))
	}
	ok = append(ok, p.Publish(ctx, &publisher.Message{Data: []byte("unordered")}))
	e.srv.FailPublish(orderingtest.Data("unordered-bad"), codes.InvalidArgument, 1)
	_, err := p.Publish(ctx, &publisher.Message{Data: []byte("unordered-bad")}).Get(ctx)
	require.Error(t, err)
	for _, msg := range []*publisher.Message{
		{},
		{Data: []byte("x"), Headers: map[string]string{"googx": "reserved"}},
	} {
		_, err := p.Publish(ctx, msg, publisher.WithOrderingKey("K")).Get(ctx)
		var ve *publisher.ValidationError
		require.ErrorAs(t, err, &ve)
	}
	for i, r := range ok {
		_, err := r.Get(ctx)
		require.NoError(t, err, "result %d", i)
	}
	// K-8 was held until K resumed, or sent after: it resumed.
	before := m.Collect(t, topicAttr, topic, keys)
	require.NoError(t, p.Close(ctx))
	_, err = p.Publish(ctx, &publisher.Message{Data: []byte("late")}, publisher.WithOrderingKey("K")).Get(ctx)
	require.ErrorIs(t, err, publisher.ErrClosed)
	got := m.Collect(t, topicAttr, topic, keys)

	t.Run("messages", func(t *testing.T) {
		in := got["keyorder.publisher.messages"]
		assert.Equal(t, "{message}", in.Unit)
		assert.Equal(t, map[string]float64{
			"keyorder.outcome=published": 9, // K-0, K-1, K-8, K-9, L-0..L-3, and the unordered one
			"keyorder.outcome=failed":    2, // K-2, and unordered-bad
			"keyorder.outcome=skipped":   float64(len(tail)),
			"keyorder.outcome=invalid":   3, // 2 invalid, 1 after Close
		}, in.Points)
		assert.Len(t, tail, 5)
	})
	t.Run("publish.duration", func(t *testing.T) {
		in := got["keyorder.publisher.publish.duration"]
		assert.Equal(t, "s", in.Unit)
		assert.Equal(t, map[string]float64{
			"keyorder.outcome=published": 8,
			"keyorder.outcome=failed":    1,
			"keyorder.outcome=skipped":   5,
		}, in.Points, "one per Result of a key handed to the official client; none for refused or unordered ones")
		for k, sum := range in.Sums {
			assert.Positive(t, sum, k)
		}
	})
	t.Run("paused_keys", func(t *testing.T) {
		mu.Lock()
		defer mu.Unlock()
		require.NoError(t, readErr)
		require.NotNil(t, whilePaused, "read when K paused")
		assert.Equal(t, "{key}", whilePaused["keyorder.publisher.paused_keys"].Unit)
		assert.Equal(t, map[string]float64{"": 1}, whilePaused["keyorder.publisher.paused_keys"].Points)
		assert.Equal(t, map[string]float64{
			"keyorder.outcome=published": 6, // L-0..L-3, K-0, K-1
			"keyorder.outcome=failed":    1,
			"keyorder.outcome=skipped":   5,
		}, whilePaused["keyorder.publisher.messages"].Points,
			"the failure and its tail are counted before K-2's Result is ready")
		assert.Equal(t, map[string]float64{"": 0}, before["keyorder.publisher.paused_keys"].Points, "K resumed")
		assert.Empty(t, got["keyorder.publisher.paused_keys"].Points, "observed after Close")
	})
	t.Run("hot_keys", func(t *testing.T) {
		assert.Zero(t, got["keyorder.publisher.hot_keys"].Points[""])
	})
	t.Run("logs", func(t *testing.T) {
		recs := logs.Records(t)
		require.Len(t, recs, 2, "one pause, one resume, nothing per message: %v", recs)
		paused, resumed := recs[0], recs[1]
		assert.Equal(t, "WARN", paused["level"])
		assert.Equal(t, "keyorder/publisher: key paused", paused["msg"])
		assert.Equal(t, "K", paused["key"])
		assert.Equal(t, topic, paused["topic"])
		assert.Equal(t, 6.0, paused["failed"], "K-2 and its tail")
		assert.Contains(t, paused["error"], "FailedPrecondition")
		assert.Equal(t, "INFO", resumed["level"])
		assert.Equal(t, "keyorder/publisher: key resumed", resumed["msg"])
		assert.Equal(t, "K", resumed["key"])
		assert.Equal(t, topic, resumed["topic"])
		assert.Equal(t, 1.0, resumed["pauses"], "K paused once")
	})
}

// TestKeyPausedOncePerEpisode publishes to a topic that does not exist
// yet, as a relay started before its topic does: every message of keys a
// and b fails, each pausing its key, and each key logs one pause, not one
// per failure. Once the topic exists, a's next message is published and
// ends its episode: one resume, with the count of its pauses; b, not
// published since, logs no resume. A new failure of a starts a new
// episode.
func TestKeyPausedOncePerEpisode(t *testing.T) {
	t.Parallel()
	var logs metrictest.Log
	e := newFakeEnv(t)
	ctx := testContext(t)
	id := fmt.Sprintf("later-%d", topicSeq.Add(1))
	e.topic = id
	p := e.newPublisher(t, nil, publisher.WithPublishSettings(settings(1)), publisher.WithLogger(slog.New(logs.Handler())))
	publish := func(key string, i int) error {
		_, err := p.Publish(ctx, &publisher.Message{Data: []byte(fmt.Sprintf("%s-%d", key, i))}, publisher.WithOrderingKey(key)).Get(ctx)
		return err
	}
	for i := range 10 {
		require.Error(t, publish("a", i))
		if i < 5 {
			require.Error(t, publish("b", i))
		}
	}
	_, err := e.client.TopicAdminClient.CreateTopic(ctx, &pubsubpb.Topic{Name: p.Topic()})
	require.NoError(t, err)
	require.NoError(t, publish("a", 10))
	require.NoError(t, publish("a", 11))
	e.srv.FailPublish(orderingtest.Data("a-12"), codes.PermissionDenied, 1)
	require.Error(t, publish("a", 12))
	require.NoError(t, p.Flush(ctx))

	type line struct {
		level, msg, key string
		pauses          float64
	}
	var got []line
	for _, r := range logs.Records(t) {
		l := line{level: r["level"].(string), msg: r["msg"].(string), key: r["key"].(string)}
		if n, ok := r["pauses"].(float64); ok {
			l.pauses = n
		}
		got = append(got, l)
	}
	assert.Equal(t, []line{
		{"WARN", "keyorder/publisher: key paused", "a", 0},
		{"WARN", "keyorder/publisher: key paused", "b", 0},
		{"INFO", "keyorder/publisher: key resumed", "a", 10},
		{"WARN", "keyorder/publisher: key paused", "a", 0},
	}, got)
}

// TestLogPerFailure fails three keys, one message each, among many
// messages, and checks that each failure is logged once at Warn and,
// once the key publishes again, its resume once at Info, and nothing
// else.
func TestLogPerFailure(t *testing.T) {
	t.Parallel()
	var logs metrictest.Log
	e := newFakeEnv(t)
	ctx := testContext(t)
	for _, k := range []string{"a", "b", "c"} {
		e.srv.FailPublish(orderingtest.Data(k+"-5"), codes.PermissionDenied, 1)
	}
	p := e.newPublisher(t, nil, publisher.WithPublishSettings(settings(1)), publisher.WithLogger(slog.New(logs.Handler())))
	var rs []*publisher.Result
	for i := 0; i < 20; i++ {
		for _, k := range []string{"a", "b", "c", "d"} {
			rs = append(rs, p.Publish(ctx, &publisher.Message{Data: []byte(fmt.Sprintf("%s-%d", k, i))}, publisher.WithOrderingKey(k)))
		}
	}
	require.NoError(t, p.Flush(ctx))
	failed := 0
	for _, r := range rs {
		if _, err := r.Get(ctx); err != nil {
			failed++
		}
	}
	// Each key's next message ends its episode: a resume.
	for _, k := range []string{"a", "b", "c", "d"} {
		_, err := p.Publish(ctx, &publisher.Message{Data: []byte(k + "-20")}, publisher.WithOrderingKey(k)).Get(ctx)
		require.NoError(t, err)
	}
	require.NoError(t, p.Close(ctx))

	recs := logs.Records(t)
	var paused, resumed []string
	n := 0
	for _, r := range recs {
		switch {
		case r["level"] == "WARN" && r["msg"] == "keyorder/publisher: key paused":
			paused = append(paused, r["key"].(string))
			n += int(r["failed"].(float64))
		case r["level"] == "INFO" && r["msg"] == "keyorder/publisher: key resumed":
			resumed = append(resumed, r["key"].(string))
		default:
			t.Errorf("unexpected record %v", r)
		}
	}
	sort.Strings(paused)
	sort.Strings(resumed)
	assert.Equal(t, []string{"a", "b", "c"}, paused)
	assert.Equal(t, []string{"a", "b", "c"}, resumed)
	assert.Equal(t, failed, n, "the failed counts of the records add up to the failed Results")
}

// TestObservabilityOptions checks the options' validation: nil is an
// invalid configuration, whose error says what to use instead.
func TestObservabilityOptions(t *testing.T) {
	t.Parallel()
	e := newFakeEnv(t)
	for _, tc := range []struct {
		name string
		opt  publisher.Option
		want string
	}{
		{"nil meter provider", publisher.WithMeterProvider(nil), "global provider"},
		{"nil logger", publisher.WithLogger(nil), "slog.DiscardHandler"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			p, err := publisher.New(e.client, e.topic, tc.opt)
			require.ErrorIs(t, err, publisher.ErrInvalidConfig)
			assert.Contains(t, err.Error(), tc.want)
			assert.Nil(t, p)
		})
	}
}

// TestDefaultLogger checks that a publisher logs to slog.Default() as it
// is when New runs. It sets the default logger, so it does not run in
// parallel.
func TestDefaultLogger(t *testing.T) {
	var logs metrictest.Log
	prev := slog.Default()
	slog.SetDefault(slog.New(logs.Handler()))
	t.Cleanup(func() { slog.SetDefault(prev) })

	e := newFakeEnv(t)
	ctx := testContext(t)
	e.srv.FailPublish(orderingtest.Data("k-0"), codes.NotFound, 1)
	p := e.newPublisher(t, nil)
	slog.SetDefault(prev) // New has looked it up already
	_, err := p.Publish(ctx, &publisher.Message{Data: []byte("k-0")}, publisher.WithOrderingKey("k")).Get(ctx)
	require.Error(t, err)
	require.NoError(t, p.Close(ctx))
	recs := logs.Records(t)
	require.Len(t, recs, 1, "a pause, and no resume without a publish: %v", recs)
	assert.Equal(t, "keyorder/publisher: key paused", recs[0]["msg"])
}

// TestUnorderedCountedByFlush checks that every unordered message, whose
// Result is the official client's own, is counted once Flush returns, with
// and without flow control, where the watch settles messages differently.
func TestUnorderedCountedByFlush(t *testing.T) {
	t.Parallel()
	for _, fc := range []bool{false, true} {
		t.Run(fmt.Sprintf("flow control %v", fc), func(t *testing.T) {
			t.Parallel()
			m := metrictest.NewMeter(t)
			e := newFakeEnv(t)
			ctx := testContext(t)
			topic := "projects/" + harness.Project + "/topics/" + e.topic
			s := settings(10)
			if fc {
				s.FlowControlSettings = pubsub.FlowControlSettings{MaxOutstandingMessages: 50, LimitExceededBehavior: pubsub.FlowControlBlock}
			}
			p := e.newPublisher(t, nil, publisher.WithMeterProvider(m), publisher.WithPublishSettings(s))
			const n = 500
			for i := range n {
				p.Publish(ctx, &publisher.Message{Data: []byte(fmt.Sprint(i))})
			}
			require.NoError(t, p.Flush(ctx))
			got := m.Collect(t, topicAttr, topic, nil)
			assert.Equal(t, map[string]float64{"keyorder.outcome=published": n}, got["keyorder.publisher.messages"].Points)
		})
	}
}

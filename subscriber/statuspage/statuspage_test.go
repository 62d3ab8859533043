package statuspage_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/keyorder/keyorder/internal/harness"
	"github.com/keyorder/keyorder/internal/leaktest"
	"github.com/keyorder/keyorder/publisher"
	"github.com/keyorder/keyorder/subscriber"
	"github.com/keyorder/keyorder/subscriber/statuspage"
)

func TestMain(m *testing.M) { leaktest.VerifyTestMain(m) }

// stuck is a key that needs escaping in HTML.
const stuck = "<b>stuck</b>"

func get(t *testing.T, url string) (string, *http.Response) {
	t.Helper()
	res, err := http.Get(url)
	require.NoError(t, err)
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, res.StatusCode, "%s", body)
	return string(body), res
}

func status(t *testing.T, url string) (statuspage.Status, map[string]any) {
	t.Helper()
	body, res := get(t, url+"?format=json")
	assert.Equal(t, "application/json", res.Header.Get("Content-Type"))
	var st statuspage.Status
	require.NoError(t, json.Unmarshal([]byte(body), &st))
	var raw map[string]any
	require.NoError(t, json.Unmarshal([]byte(body), &raw))
	return st, raw
}

// TestStatusPage serves the page of a subscription with work held in it:
// key stuck fails its first message, which waits an hour for its retry
// with 2 more behind it, and key slow blocks in its first call with one
// more behind it: 4 queued, 1 running. The JSON must report them, and the HTML show the same
// values, the key escaped.
func TestStatusPage(t *testing.T) {
	t.Parallel()
	_, client := harness.Fake(t)
	ctx := harness.Context(t, 30*time.Second)
	sub, err := subscriber.CreateWithTopic(ctx, client, "status", "status",
		subscriber.WithBackoff(time.Hour, time.Hour), subscriber.WithWorkers(2),
		subscriber.WithLogger(slog.New(slog.DiscardHandler)))
	require.NoError(t, err)
	p, err := publisher.New(client, "status")
	require.NoError(t, err)
	for _, m := range []struct{ key, data string }{{stuck, "s1"}, {stuck, "s2"}, {stuck, "s3"}, {"slow", "w1"}, {"slow", "w2"}} {
		_, err := p.Publish(ctx, &publisher.Message{Data: []byte(m.data)}, publisher.WithOrderingKey(m.key)).Get(ctx)
		require.NoError(t, err)
	}
	require.NoError(t, p.Close(ctx))

	srv := httptest.NewServer(statuspage.Handler(sub))
	defer srv.Close()

	t.Run("not receiving", func(t *testing.T) {
		st, raw := status(t, srv.URL)
		assert.False(t, st.Receiving)
		assert.Equal(t, sub.Name(), st.Subscription)
		for _, list := range []string{"held", "top_backlog", "top_age", "partitions"} {
			assert.Equal(t, []any{}, raw[list], "%s: a list, for the script", list)
		}
		page, _ := get(t, srv.URL)
		assert.Contains(t, page, ">not receiving<")
	})

	injected := errors.New("injected <failure>")
	rctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	release := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- sub.Receive(rctx, func(_ context.Context, d *subscriber.Delivery) error {
			switch string(d.Data) {
			case "s1":
				return injected
			case "w1":
				<-release
			}
			return nil
		})
	}()
	defer func() {
		cancel()
		close(release)
		require.NoError(t, <-done)
	}()
	for st := sub.Stats(); st.Queued != 4 || st.Running != 1 || len(st.Held) != 1; st = sub.Stats() {
		select {
		case <-ctx.Done():
			t.Fatalf("the work never settled: %+v", st)
		case <-time.After(time.Millisecond):
		}
	}

	st, raw := status(t, srv.URL)
	t.Run("json", func(t *testing.T) {
		for _, field := range []string{"subscription", "at", "receiving", "workers", "running", "queued", "keys",
			"oldest_age", "counts", "active_partitions", "partitions", "held", "top_backlog", "top_age"} {
			assert.Contains(t, raw, field)
		}
		assert.True(t, st.Receiving)
		assert.Equal(t, 2, st.Workers)
		assert.Equal(t, 1, st.Running)
		assert.Equal(t, 4, st.Queued)
		assert.Equal(t, 2, st.Keys)
		assert.Positive(t, st.OldestAge)
		assert.Equal(t, int64(5), st.Counts.Received)
		assert.Equal(t, int64(1), st.Counts.Retried)
		assert.Equal(t, 2, st.ActivePartitions)
		assert.Len(t, st.Partitions, 2)

		require.Len(t, st.Held, 1)
		h := st.Held[0]
		assert.Equal(t, stuck, h.Key)
		assert.Equal(t, "injected <failure>", h.Error)
		assert.False(t, h.Held, "retrying here")
		require.NotNil(t, h.RetryAt)
		assert.WithinDuration(t, time.Now().Add(time.Hour), *h.RetryAt, time.Minute)
		assert.Equal(t, 1, h.Attempt)
		assert.Equal(t, 2, h.Queued, "the key's deliveries behind the failed message")

		require.Len(t, st.TopBacklog, 2)
		assert.Equal(t, stuck, st.TopBacklog[0].Key, "3 here beat 2")
		assert.Equal(t, 3, st.TopBacklog[0].Queued)
		assert.True(t, st.TopBacklog[0].Held)
		assert.Equal(t, "slow", st.TopBacklog[1].Key)
		assert.True(t, st.TopBacklog[1].Running)
		assert.Positive(t, st.TopBacklog[1].RunningFor)
		require.Len(t, st.TopAge, 2)
	})

	t.Run("html", func(t *testing.T) {
		page, res := get(t, srv.URL)
		assert.Equal(t, "text/html; charset=utf-8", res.Header.Get("Content-Type"))
		assert.Contains(t, page, sub.Name())
		assert.Contains(t, page, ">receiving<")
		assert.NotContains(t, page, stuck, "keys are escaped")
		assert.Equal(t, 3, strings.Count(page, "&lt;b&gt;stuck&lt;/b&gt;"), "held, and both rankings")
		assert.Contains(t, page, "injected &lt;failure&gt;")
		assert.Contains(t, page, `<span class="tag run">retrying</span>`)
		for id, want := range map[string]string{
			"received": "5", "retried": "1", "queued": "4", "running": "1 / 2", "keys": "2", "active": "2",
		} {
			assert.Contains(t, page, `id="`+id+`">`+want+`<`, id)
		}
		for _, p := range st.Partitions {
			assert.Contains(t, page, `<td class="n">`+strconv.Itoa(p.Partition)+`</td>`)
		}
	})

	t.Run("methods", func(t *testing.T) {
		res, err := http.Post(srv.URL, "text/plain", strings.NewReader("x"))
		require.NoError(t, err)
		res.Body.Close()
		assert.Equal(t, http.StatusMethodNotAllowed, res.StatusCode)
		assert.Equal(t, "GET, HEAD", res.Header.Get("Allow"))
	})
}

// TestStatusPageParkedKeys checks that a key parked by the running Receive
// shows on the page, in the JSON and in the HTML, with the counts.
func TestStatusPageParkedKeys(t *testing.T) {
	t.Parallel()
	srv, client := harness.Fake(t)
	ctx := harness.Context(t, 30*time.Second)
	sub, err := subscriber.CreateWithTopic(ctx, client, "park-topic", "park-sub",
		subscriber.WithParking("park-parked"), subscriber.WithLogger(slog.New(slog.DiscardHandler)))
	require.NoError(t, err)
	p, err := publisher.New(client, "park-topic")
	require.NoError(t, err)
	_, err = p.Publish(ctx, &publisher.Message{Data: []byte("poison")}, publisher.WithOrderingKey(stuck)).Get(ctx)
	require.NoError(t, err)
	require.NoError(t, p.Close(ctx))

	rctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		done <- sub.Receive(rctx, func(context.Context, *subscriber.Delivery) error {
			return subscriber.Permanent(errors.New("cannot <parse>"))
		})
	}()
	defer func() {
		cancel()
		require.NoError(t, <-done)
	}()
	// The park is recorded first, then the message is moved and counted.
	require.NoError(t, srv.WaitFor(ctx, func() bool {
		st := sub.Stats()
		return st.Parked == 1 && len(st.ParkedKeys) == 1 && st.ParkedKeys[0].Messages == 1
	}))

	web := httptest.NewServer(statuspage.Handler(sub))
	defer web.Close()
	st, _ := status(t, web.URL)
	require.Len(t, st.Parked, 1)
	assert.Equal(t, stuck, st.Parked[0].Key)
	assert.Equal(t, 1, st.Parked[0].Messages)
	assert.Contains(t, st.Parked[0].Error, "cannot <parse>")
	assert.EqualValues(t, 1, st.Counts.Parked)
	assert.EqualValues(t, 1, st.Counts.Failed, "the message that parked the key failed for good")

	html, _ := get(t, web.URL)
	assert.Contains(t, html, "Parked keys")
	assert.Contains(t, html, "&lt;b&gt;stuck&lt;/b&gt;")
	assert.Contains(t, html, "this process's own: <span id=\"parkcounts\">parked 1, released 0</span>")
}

// TestStatusPageShowsTheSubscription: a process's page shows the keys that
// another process parked, with the release request pending on them, from
// the control log, and says which counts are its own: this one parked
// nothing.
func TestStatusPageShowsTheSubscription(t *testing.T) {
	t.Parallel()
	srv, client := harness.Fake(t)
	ctx := harness.Context(t, 30*time.Second)
	quiet := subscriber.WithLogger(slog.New(slog.DiscardHandler))
	parker, err := subscriber.CreateWithTopic(ctx, client, "shared-topic", "shared-sub",
		subscriber.WithParking("shared-parked"), subscriber.WithParkingWait(100*time.Millisecond), quiet)
	require.NoError(t, err)
	p, err := publisher.New(client, "shared-topic")
	require.NoError(t, err)
	_, err = p.Publish(ctx, &publisher.Message{Data: []byte("poison")}, publisher.WithOrderingKey("k")).Get(ctx)
	require.NoError(t, err)
	require.NoError(t, p.Close(ctx))
	pctx, stopParker := context.WithCancel(ctx)
	parked := make(chan error, 1)
	go func() {
		parked <- parker.Receive(pctx, func(context.Context, *subscriber.Delivery) error {
			return subscriber.Permanent(errors.New("bad"))
		})
	}()
	require.NoError(t, srv.WaitFor(ctx, func() bool { return parker.Stats().Parked == 1 }))
	stopParker()
	require.NoError(t, <-parked)

	other, err := subscriber.Open(ctx, harness.Client(t, srv.Addr), "shared-sub",
		subscriber.WithParking("shared-parked"), subscriber.WithParkingWait(100*time.Millisecond), quiet)
	require.NoError(t, err)
	running, proceed := make(chan struct{}), make(chan struct{})
	octx, stopOther := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		done <- other.Receive(octx, func(context.Context, *subscriber.Delivery) error {
			close(running)
			<-proceed
			return nil
		})
	}()
	defer func() {
		stopOther()
		require.NoError(t, <-done)
	}()
	require.NoError(t, parker.RequestRelease(ctx, "k"))
	select {
	case <-running:
	case <-ctx.Done():
		t.Fatal("the release request was not carried out")
	}
	web := httptest.NewServer(statuspage.Handler(other))
	defer web.Close()
	st, _ := status(t, web.URL)
	require.Len(t, st.Parked, 1, "parked by the other process")
	assert.Equal(t, "k", st.Parked[0].Key)
	require.NotNil(t, st.Parked[0].ReleaseRequested, "the request pending")
	assert.Contains(t, st.Parked[0].ReleaseRequestedBy, "(pid ")
	assert.Zero(t, st.Counts.Parked, "this process parked nothing")
	html, _ := get(t, web.URL)
	assert.Contains(t, html, "this process's own: <span id=\"parkcounts\">parked 0, released 0</span>")
	assert.Contains(t, html, st.Parked[0].ReleaseRequestedBy)
	close(proceed)
}

// TestHandlerOfNil: a nil Subscription is refused when the page is made,
// with a message that says so, not on its first request.
func TestHandlerOfNil(t *testing.T) {
	assert.PanicsWithValue(t, "statuspage: Handler called with a nil *subscriber.Subscription", func() { statuspage.Handler(nil) })
}

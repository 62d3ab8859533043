package subscriber_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"cloud.google.com/go/pubsub/v2"
	"github.com/stretchr/testify/require"

	"github.com/keyorder/keyorder/internal/harness"
	"github.com/keyorder/keyorder/ordering/orderingtest"
	"github.com/keyorder/keyorder/publisher"
	"github.com/keyorder/keyorder/subscriber"
)

// fakeEnv is an ordering-faithful fake server with a topic, a keyorder
// subscription on it and a publisher, for one test.
type fakeEnv struct {
	srv    *orderingtest.Server
	client *pubsub.Client
	topic  string // full names
	sub    *subscriber.Subscription
}

func newFakeEnv(t *testing.T, fopts []orderingtest.Option, sopts ...subscriber.Option) fakeEnv {
	t.Helper()
	srv, client := harness.Fake(t, fopts...)
	topic, subID := names()
	s, err := subscriber.CreateWithTopic(testContext(t), client, topic, subID, sopts...)
	require.NoError(t, err)
	return fakeEnv{srv: srv, client: client, topic: s.Topic(), sub: s}
}

// publish sends perKey messages to each key, interleaved, with data
// "key/seq" and seq counting from 1, and waits for them.
func (e fakeEnv) publish(t *testing.T, keys []string, perKey int) {
	t.Helper()
	publishRange(t, e.client, e.topic, keys, 1, perKey, "")
}

// publishRange sends messages first..last of each key to topic,
// interleaved, with data prefix+"key/seq", and waits for them.
func publishRange(t *testing.T, client *pubsub.Client, topic string, keys []string, first, last int, prefix string) {
	t.Helper()
	ctx := testContext(t)
	p, err := publisher.New(client, topic)
	require.NoError(t, err)
	var results []*publisher.Result
	for i := first; i <= last; i++ {
		for _, k := range keys {
			results = append(results, p.Publish(ctx, &publisher.Message{Data: []byte(fmt.Sprintf("%s%s/%d", prefix, k, i))}, publisher.WithOrderingKey(k)))
		}
	}
	for _, r := range results {
		_, err := r.Get(ctx)
		require.NoError(t, err)
	}
	require.NoError(t, p.Close(ctx))
}

func keyNames(n int) []string {
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("key-%d", i)
	}
	return keys
}

// tracker checks, call by call, that every handler call for a key is that
// key's next unprocessed message and that a key's calls never overlap, and
// feeds successful calls to an order checker that expects each message
// exactly once, in order.
type tracker struct {
	mu        sync.Mutex
	next      map[string]int  // the key's next unprocessed seq
	busy      map[string]bool // a call of the key is running
	calls     map[string]int  // handler calls per message, "key/seq"
	bad       []string        // violations, as they happened
	check     *orderingtest.Checker
	remaining int
	done      chan struct{} // closed when every message has been processed
	changed   chan struct{} // closed and replaced after every call ends
}

func newTracker(keys []string, perKey int) *tracker {
	tr := &tracker{
		next: map[string]int{}, busy: map[string]bool{}, calls: map[string]int{},
		check: orderingtest.NewChecker(), remaining: len(keys) * perKey, done: make(chan struct{}),
		changed: make(chan struct{}),
	}
	for _, k := range keys {
		tr.next[k] = 1
		tr.check.Expect(k, perKey)
	}
	return tr
}

func parse(d *subscriber.Delivery) (string, int) {
	i := strings.LastIndexByte(string(d.Data), '/')
	seq, err := strconv.Atoi(string(d.Data[i+1:]))
	if err != nil {
		panic(fmt.Sprintf("bad test message %q", d.Data))
	}
	return string(d.Data[:i]), seq
}

func (tr *tracker) begin(d *subscriber.Delivery) (string, int) {
	key, seq := parse(d)
	tr.mu.Lock()
	defer tr.mu.Unlock()
	tr.calls[string(d.Data)]++
	if d.Key != key {
		tr.bad = append(tr.bad, fmt.Sprintf("%s delivered with key %q", d.Data, d.Key))
	}
	if tr.busy[key] {
		tr.bad = append(tr.bad, fmt.Sprintf("%s: called while another call of its key runs", d.Data))
	}
	if seq != tr.next[key] {
		tr.bad = append(tr.bad, fmt.Sprintf("%s: called when the key's next unprocessed message is %d", d.Data, tr.next[key]))
	}
	tr.busy[key] = true
	return key, seq
}

func (tr *tracker) end(key string, seq int, ok bool) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	close(tr.changed)
	tr.changed = make(chan struct{})
	tr.busy[key] = false
	if !ok {
		return
	}
	tr.check.Record(key, seq)
	if seq == tr.next[key] {
		tr.next[key]++
	}
	if tr.remaining--; tr.remaining == 0 {
		close(tr.done)
	}
}

// processed returns how many messages of key have been processed.
func (tr *tracker) processed(key string) int {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return tr.next[key] - 1
}

// callsOf returns the number of handler calls for message data.
func (tr *tracker) callsOf(data string) int {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return tr.calls[data]
}

// expect adds key, with n messages, to what the tracker waits for.
func (tr *tracker) expect(key string, n int) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	tr.next[key] = 1
	tr.check.Expect(key, n)
	tr.remaining += n
}

// await waits until cond holds, checking it after every handler call, or
// returns ctx.Err(). It may be called from a handler.
func (tr *tracker) await(ctx context.Context, cond func() bool) error {
	for {
		tr.mu.Lock()
		changed := tr.changed
		tr.mu.Unlock()
		if cond() {
			return nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// processedExcept returns how many messages of keys other than key have
// been processed.
func (tr *tracker) processedExcept(key string) int {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	n := 0
	for k, next := range tr.next {
		if k != key {
			n += next - 1
		}
	}
	return n
}

// handler wraps work, which may fail, panic or exit the goroutine, with
// the tracker's checks.
func (tr *tracker) handler(work func(ctx context.Context, d *subscriber.Delivery) error) subscriber.Handler {
	return func(ctx context.Context, d *subscriber.Delivery) (err error) {
		key, seq := tr.begin(d)
		returned := false
		defer func() {
			if r := recover(); r != nil {
				tr.end(key, seq, false)
				panic(r)
			}
			tr.end(key, seq, returned && err == nil) // runtime.Goexit did not return
		}()
		err = work(ctx, d)
		returned = true
		return err
	}
}

// receive runs Receive until every message is processed or the deadline
// passes, then stops it and checks what the tracker saw.
func (tr *tracker) receive(t *testing.T, s *subscriber.Subscription, h subscriber.Handler) {
	t.Helper()
	tr.receiveUntil(t, s, h, nil)
}

// receiveUntil is receive that, once every message is processed, also
// waits for settled to hold before it stops Receive.
func (tr *tracker) receiveUntil(t *testing.T, s *subscriber.Subscription, h subscriber.Handler, settled func(ctx context.Context) error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- s.Receive(ctx, h) }()
	select {
	case <-tr.done:
		if settled != nil {
			wctx, cancel := context.WithTimeout(ctx, testTimeout)
			defer cancel()
			require.NoError(t, settled(wctx), "the server did not settle")
		}
	case err := <-done:
		t.Fatalf("Receive returned early: %v", err)
	case <-time.After(testTimeout):
		t.Errorf("not every message was processed in %v", testTimeout)
	}
	cancel()
	require.NoError(t, <-done)
	tr.verify(t)
}

// settled returns a condition for receiveUntil: nothing is outstanding on
// e's subscription, and cond holds of its stats.
func (e fakeEnv) settled(cond func(orderingtest.Stats) bool) func(ctx context.Context) error {
	return func(ctx context.Context) error {
		return e.srv.WaitFor(ctx, func() bool {
			st := e.srv.Stats(e.sub.Name())
			return st.Outstanding == 0 && (cond == nil || cond(st))
		})
	}
}

func (tr *tracker) verify(t *testing.T) {
	t.Helper()
	tr.mu.Lock()
	defer tr.mu.Unlock()
	require.Empty(t, tr.bad, "handler calls out of order")
	rep := tr.check.Report()
	require.True(t, rep.OK(), "%s", rep.String())
}

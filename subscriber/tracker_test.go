package subscriber_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/keyorder/keyorder/ordering/orderingtest"
	"github.com/keyorder/keyorder/subscriber"
)

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

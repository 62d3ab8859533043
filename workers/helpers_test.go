package workers_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/keyorder/keyorder/ordering"
	"github.com/keyorder/keyorder/workers"
)

// patience bounds every wait in the tests. Inside a synctest bubble time is
// fake, so a wait that can never end fails at once instead of after it.
const patience = 10 * time.Second

// newPool starts a pool that is closed when the test ends.
func newPool(t *testing.T, n int, opts ...workers.Option) *workers.Pool {
	t.Helper()
	p, err := workers.New(n, opts...)
	require.NoError(t, err)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), patience)
		defer cancel()
		assert.NoError(t, p.Close(ctx))
	})
	return p
}

// keysOn returns count distinct keys that all map to partition part of n.
func keysOn(n, part, count int) []string {
	var keys []string
	for i := 0; len(keys) < count; i++ {
		if k := fmt.Sprintf("key-%d", i); ordering.Partition(k, n) == part {
			keys = append(keys, k)
		}
	}
	return keys
}

// spreadKeys returns n keys, the i-th on partition i of n.
func spreadKeys(n int) []string {
	keys := make([]string, n)
	for i := range keys {
		keys[i] = keysOn(n, i, 1)[0]
	}
	return keys
}

// events is an ordered record of what tasks did, safe for concurrent use.
type events struct {
	mu   sync.Mutex
	list []string
}

func (e *events) add(format string, args ...any) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.list = append(e.list, fmt.Sprintf(format, args...))
}

func (e *events) get() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]string(nil), e.list...)
}

// task is a workers.Task that records its Run and Drop under its name, after
// calling run if it is set.
type task struct {
	name string
	log  *events
	run  func()
}

func (t *task) Run() {
	if t.run != nil {
		t.run()
	}
	t.log.add("run %s", t.name)
}

func (t *task) Drop() { t.log.add("drop %s", t.name) }

// gate is a task body that closes started, then waits for open.
type gate struct {
	started, release chan struct{}
}

func newGate() *gate {
	return &gate{started: make(chan struct{}), release: make(chan struct{})}
}

func (g *gate) run() {
	close(g.started)
	<-g.release
}

func (g *gate) open() { close(g.release) }

// waitStarted fails the test unless the gate's task starts in time.
func (g *gate) waitStarted(t *testing.T) {
	t.Helper()
	select {
	case <-g.started:
	case <-time.After(patience):
		require.FailNow(t, "gated task did not start")
	}
}

// barrier lets n tasks each wait until all n are running at once, or
// until a deadline shared by all of them, patience after newBarrier.
type barrier struct {
	left     atomic.Int32
	all      chan struct{}
	deadline time.Time
}

func newBarrier(n int) *barrier {
	b := &barrier{all: make(chan struct{}), deadline: time.Now().Add(patience)}
	b.left.Store(int32(n))
	return b
}

// arrive reports whether every task arrived before the deadline.
func (b *barrier) arrive() bool {
	if b.left.Add(-1) == 0 {
		close(b.all)
	}
	select {
	case <-b.all:
		return true
	case <-time.After(time.Until(b.deadline)):
		return false
	}
}

// notYet fails the test if ch, a result channel, has a value once every
// goroutine of the synctest bubble is blocked: what sends on it is still
// waiting.
func notYet(t *testing.T, ch <-chan error, what string) {
	t.Helper()
	synctest.Wait()
	select {
	case err := <-ch:
		require.FailNow(t, what+" returned too early", "err: %v", err)
	default:
	}
}

// busyPool returns a pool of n partitions running the gated task "gated"
// of key "k", with a task of key "k" queued behind it under each name in
// queued.
func busyPool(t *testing.T, log *events, n int, queued []string, opts ...workers.Option) (*workers.Pool, *gate) {
	t.Helper()
	p := newPool(t, n, opts...)
	g := newGate()
	require.NoError(t, p.SubmitTask(context.Background(), "k", &task{name: "gated", log: log, run: g.run}))
	g.waitStarted(t)
	for _, name := range queued {
		require.NoError(t, p.SubmitTask(context.Background(), "k", &task{name: name, log: log}))
	}
	return p, g
}

// result runs f in a goroutine and returns a channel that gets its error.
func result(f func() error) <-chan error {
	ch := make(chan error, 1)
	go func() { ch <- f() }()
	return ch
}

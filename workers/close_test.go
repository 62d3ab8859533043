package workers_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/keyorder/keyorder/workers"
)

func TestCloseRunsQueued(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		const n = 2
		p := newPool(t, n)
		logs := make([]*events, n) // one per partition, whose order is defined
		gates := make([]*gate, n)
		want := make([][]string, n)
		for part, key := range spreadKeys(n) {
			logs[part], gates[part] = new(events), newGate()
			require.NoError(t, p.Submit(context.Background(), key, gates[part].run))
			for i := range 3 {
				name := fmt.Sprintf("p%d-%d", part, i)
				require.NoError(t, p.SubmitTask(context.Background(), key, &task{name: name, log: logs[part]}))
				want[part] = append(want[part], "run "+name)
			}
		}
		closed := result(func() error { return p.Close(context.Background()) })
		notYet(t, closed, "Close before the queued tasks ran")
		assert.ErrorIs(t, p.Submit(context.Background(), "k", func() {}), workers.ErrClosed)

		for _, g := range gates {
			g.open()
		}
		require.NoError(t, <-closed)
		for part := range n {
			assert.Equal(t, want[part], logs[part].get(), "partition %d", part)
		}
	})
}

// TestCloseBoundedByCtx checks that Close returns ctx.Err() when its ctx
// ends, having dropped what was queued, and that a later Close waits again.
func TestCloseBoundedByCtx(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		log := new(events)
		p, g := busyPool(t, log, 1, []string{"a", "b"})

		for range 2 { // the second Close waits again, and again gives up
			start := time.Now()
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			require.ErrorIs(t, p.Close(ctx), context.DeadlineExceeded)
			cancel()
			assert.Equal(t, time.Second, time.Since(start), "Close waited for its ctx")
		}
		assert.Equal(t, []string{"drop a", "drop b"}, log.get(), "dropped before Close returned")

		g.open()
		require.NoError(t, p.Close(context.Background()))
		assert.Equal(t, []string{"drop a", "drop b", "run gated"}, log.get())
	})
}

func TestStopDropsQueued(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		log := new(events)
		p, g := busyPool(t, log, 2, []string{"a", "b"})

		stopped := result(func() error { return p.Stop(context.Background()) })
		notYet(t, stopped, "Stop before the running task")
		assert.Equal(t, []string{"drop a", "drop b"}, log.get(), "Stop drops at once, in order")
		g.open()
		require.NoError(t, <-stopped)
		assert.Equal(t, []string{"drop a", "drop b", "run gated"}, log.get())

		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		p, g = busyPool(t, log, 1, nil)
		require.ErrorIs(t, p.Stop(ctx), context.DeadlineExceeded, "Stop is bounded by ctx")
		g.open()
	})
}

func TestShutdownIsIdempotent(t *testing.T) {
	t.Parallel()
	closeFn, stopFn := (*workers.Pool).Close, (*workers.Pool).Stop
	tests := []struct {
		name  string
		calls []func(*workers.Pool, context.Context) error
	}{
		{"Close Close", []func(*workers.Pool, context.Context) error{closeFn, closeFn}},
		{"Close Stop", []func(*workers.Pool, context.Context) error{closeFn, stopFn}},
		{"Stop Close", []func(*workers.Pool, context.Context) error{stopFn, closeFn}},
		{"Stop Stop", []func(*workers.Pool, context.Context) error{stopFn, stopFn}},
	}
	done, cancel := context.WithCancel(context.Background())
	cancel()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			p, err := workers.New(3)
			require.NoError(t, err)
			for _, call := range tt.calls {
				require.NoError(t, call(p, context.Background()))
			}
			assert.NoError(t, p.Close(done), "a stopped pool returns nil even for a done ctx")
			assert.NoError(t, p.Stop(done))
		})
	}
	t.Run("concurrent", func(t *testing.T) {
		t.Parallel()
		p, err := workers.New(3)
		require.NoError(t, err)
		require.NoError(t, p.Submit(context.Background(), "k", func() {}))
		var wg sync.WaitGroup
		for i := range 8 {
			wg.Go(func() {
				if i%2 == 0 {
					assert.NoError(t, p.Close(context.Background()))
				} else {
					assert.NoError(t, p.Stop(context.Background()))
				}
			})
		}
		wg.Wait()
	})
}

// counted is a Task that counts its calls, to show that each accepted task
// is run or dropped exactly once.
type counted struct {
	calls        atomic.Int32
	ran, dropped *atomic.Int64
}

func (c *counted) Run() {
	c.calls.Add(1)
	c.ran.Add(1)
	runtime.Gosched()
}

func (c *counted) Drop() {
	c.calls.Add(1)
	c.dropped.Add(1)
}

// TestEveryAcceptedTaskRunsOrDropsOnce closes pools under load with ctxs of
// different lengths, and checks that every task Submit accepted was run or
// dropped, once.
func TestEveryAcceptedTaskRunsOrDropsOnce(t *testing.T) {
	t.Parallel()
	for _, grace := range []time.Duration{0, 100 * time.Microsecond, time.Millisecond, time.Minute} {
		t.Run(fmt.Sprint(grace), func(t *testing.T) {
			t.Parallel()
			p := newPool(t, 4, workers.WithQueueSize(16))
			var ran, dropped atomic.Int64
			var mu sync.Mutex
			var accepted []*counted
			busy := make(chan struct{}) // closed once the pool has taken 2,000 tasks
			var wg sync.WaitGroup
			for s := range 8 {
				wg.Go(func() {
					for i := 0; ; i++ {
						c := &counted{ran: &ran, dropped: &dropped}
						key := fmt.Sprint(rand.IntN(16))
						if i%5 == s%5 {
							key = "" // some unordered tasks too
						}
						if err := p.SubmitTask(context.Background(), key, c); err != nil {
							assert.ErrorIs(t, err, workers.ErrClosed)
							return
						}
						mu.Lock()
						accepted = append(accepted, c)
						if len(accepted) == 2000 {
							close(busy)
						}
						mu.Unlock()
					}
				})
			}
			select {
			case <-busy:
			case <-time.After(patience):
				require.FailNow(t, "the pool did not take 2,000 tasks")
			}
			ctx, cancel := context.WithTimeout(context.Background(), grace)
			err := p.Close(ctx)
			cancel()
			if err != nil {
				require.ErrorIs(t, err, context.DeadlineExceeded)
				require.NoError(t, p.Close(context.Background()))
			}
			wg.Wait()
			for _, c := range accepted {
				require.Equal(t, int32(1), c.calls.Load(), "a task was run or dropped %d times", c.calls.Load())
			}
			assert.Equal(t, int64(len(accepted)), ran.Load()+dropped.Load())
			t.Logf("accepted %d, ran %d, dropped %d", len(accepted), ran.Load(), dropped.Load())
		})
	}
}

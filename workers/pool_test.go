package workers_test

import (
	"context"
	"fmt"
	"runtime"
	"sync/atomic"
	"testing"
	"testing/synctest"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/keyorder/keyorder/ordering"
	"github.com/keyorder/keyorder/workers"
)

func TestNew(t *testing.T) {
	t.Parallel()
	noop := func(string, any, []byte) {}
	tests := []struct {
		name    string
		n       int
		opts    []workers.Option
		wantErr bool
	}{
		{"one partition", 1, nil, false},
		{"many partitions", 512, nil, false},
		{"queue of one", 2, []workers.Option{workers.WithQueueSize(1)}, false},
		{"panic handler", 2, []workers.Option{workers.WithPanicHandler(noop)}, false},
		{"nil option ignored", 2, []workers.Option{nil}, false},
		{"later option wins", 2, []workers.Option{workers.WithQueueSize(0), workers.WithQueueSize(8)}, false},
		{"zero partitions", 0, nil, true},
		{"negative partitions", -1, nil, true},
		{"too many partitions", 1<<16 + 1, nil, true},
		{"zero queue", 2, []workers.Option{workers.WithQueueSize(0)}, true},
		{"negative queue", 2, []workers.Option{workers.WithQueueSize(-3)}, true},
		{"queue too large", 2, []workers.Option{workers.WithQueueSize(1<<20 + 1)}, true},
		{"nil panic handler", 2, []workers.Option{workers.WithPanicHandler(nil)}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			p, err := workers.New(tt.n, tt.opts...)
			if tt.wantErr {
				require.ErrorIs(t, err, workers.ErrInvalidConfig)
				assert.Nil(t, p)
				return
			}
			require.NoError(t, err)
			require.NoError(t, p.Close(context.Background()))
		})
	}
}

func TestPartitionIsPinned(t *testing.T) {
	t.Parallel()
	for _, n := range []int{1, 3, 16} {
		p := newPool(t, n)
		for i := range 1000 {
			key := fmt.Sprintf("customer-%d", i)
			require.Equal(t, ordering.Partition(key, n), p.Partition(key), "key %q, n %d", key, n)
		}
		assert.Equal(t, -1, p.Partition(""), "the empty key is not pinned")
	}
}

// TestPerKeyOrder submits many keys from many goroutines at once, each key
// from one goroutine, and checks that every key's tasks ran one at a time
// and in submit order. Small queues make submitters block and interleave.
func TestPerKeyOrder(t *testing.T) {
	t.Parallel()
	tests := []struct {
		n, queue, submitters, keysEach, tasksEach int
	}{
		{n: 1, queue: 1, submitters: 4, keysEach: 4, tasksEach: 50},
		{n: 4, queue: 2, submitters: 8, keysEach: 8, tasksEach: 100},
		{n: 8, queue: 64, submitters: 8, keysEach: 16, tasksEach: 100},
	}
	for _, tt := range tests {
		name := fmt.Sprintf("n=%d/queue=%d", tt.n, tt.queue)
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			type keyLog struct {
				running, overlapped atomic.Bool
				seq                 []int // only the key's partition goroutine appends
			}
			p := newPool(t, tt.n, workers.WithQueueSize(tt.queue))
			logs := make([][]*keyLog, tt.submitters)
			done := make(chan error, tt.submitters)
			for s := range tt.submitters {
				logs[s] = make([]*keyLog, tt.keysEach)
				for k := range logs[s] {
					logs[s][k] = new(keyLog)
				}
				go func() {
					for i := range tt.tasksEach {
						for k, kl := range logs[s] {
							err := p.Submit(context.Background(), fmt.Sprintf("s%d-k%d", s, k), func() {
								if !kl.running.CompareAndSwap(false, true) {
									kl.overlapped.Store(true)
								}
								kl.seq = append(kl.seq, i)
								runtime.Gosched() // let another partition run meanwhile
								kl.running.Store(false)
							})
							if err != nil {
								done <- err
								return
							}
						}
					}
					done <- nil
				}()
			}
			for range tt.submitters {
				require.NoError(t, <-done)
			}
			require.NoError(t, p.Close(context.Background())) // happens after every task
			want := make([]int, tt.tasksEach)
			for i := range want {
				want[i] = i
			}
			for s := range logs {
				for k, kl := range logs[s] {
					assert.False(t, kl.overlapped.Load(), "s%d-k%d ran two tasks at once", s, k)
					assert.Equal(t, want, kl.seq, "s%d-k%d out of order", s, k)
				}
			}
		})
	}
}

// TestKeysOfOnePartitionShareItsGoroutine shows that keys hashed to one
// partition do not run at once, while a key of another partition does.
func TestKeysOfOnePartitionShareItsGoroutine(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		const n = 4
		p := newPool(t, n)
		same := keysOn(n, 0, 2)
		other := keysOn(n, 1, 1)[0]
		g := newGate()
		log := new(events)
		ctx := context.Background()
		require.NoError(t, p.Submit(ctx, same[0], g.run))
		require.NoError(t, p.SubmitTask(ctx, same[1], &task{name: "same", log: log}))
		require.NoError(t, p.SubmitTask(ctx, other, &task{name: "other", log: log}))

		synctest.Wait() // everything that can run has run
		assert.Equal(t, []string{"run other"}, log.get())
		g.open()
		synctest.Wait()
		assert.Equal(t, []string{"run other", "run same"}, log.get())
	})
}

// TestTasksRunInParallel submits tasks that each wait, up to a deadline,
// until all of them are running: they pass only if they run at once. It
// runs in real time, outside synctest, so that a pool serialised by any
// means, a mutex included, fails at the deadline.
func TestTasksRunInParallel(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		n    int
		keys func(n int) []string
	}{
		{"two partitions", 2, spreadKeys},
		{"every partition", 8, spreadKeys},
		{"empty keys spread", 4, func(n int) []string { return make([]string, n) }},
		{"empty keys spread over one round", 3, func(n int) []string { return make([]string, n) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			p := newPool(t, tt.n)
			keys := tt.keys(tt.n)
			b := newBarrier(len(keys))
			var together atomic.Int32
			for _, key := range keys {
				require.NoError(t, p.Submit(context.Background(), key, func() {
					if b.arrive() {
						together.Add(1)
					}
				}))
			}
			require.NoError(t, p.Close(context.Background()))
			assert.Equal(t, int32(len(keys)), together.Load(), "tasks that saw all the others running")
		})
	}
}

// TestEmptyKeysTakeTurns checks that the empty key does not stick to one
// partition even when the others are busy.
func TestEmptyKeysTakeTurns(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		const n = 3
		p := newPool(t, n)
		log := new(events)
		gates := make([]*gate, n)
		for i := range gates {
			gates[i] = newGate()
			require.NoError(t, p.Submit(context.Background(), "", gates[i].run))
		}
		for _, g := range gates {
			g.waitStarted(t) // one per partition, or some would never start
		}
		for i := range n {
			require.NoError(t, p.SubmitTask(context.Background(), "", &task{name: fmt.Sprint(i), log: log}))
		}
		gates[1].open()
		synctest.Wait()
		assert.Equal(t, []string{"run 1"}, log.get(), "the second round follows the first")
		gates[0].open()
		gates[2].open()
	})
}

package workers_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/keyorder/keyorder/workers"
)

// fullPool returns a pool of one partition with a queue of one, running a
// gated task and holding task "queued": the next Submit blocks.
func fullPool(t *testing.T, log *events) (*workers.Pool, *gate) {
	t.Helper()
	return busyPool(t, log, 1, []string{"queued"}, workers.WithQueueSize(1))
}

// TestSubmitBlocksWhileQueueFull checks that Submit blocks on a full queue
// until a slot frees or its ctx ends. A Submit whose ctx ends returns
// ctx.Err() and leaves the queue as it was: its task never runs, and the
// Submit blocked behind it takes the next slot.
func TestSubmitBlocksWhileQueueFull(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		ctx  func() (ctx context.Context, end func()) // end returns once ctx has ended
		want error
	}{
		{"until a slot frees", func() (context.Context, func()) {
			return context.Background(), func() {}
		}, nil},
		{"until ctx is cancelled", func() (context.Context, func()) {
			return context.WithCancel(context.Background())
		}, context.Canceled},
		{"until ctx deadline", func() (context.Context, func()) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			return ctx, func() { <-ctx.Done(); cancel() }
		}, context.DeadlineExceeded},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) {
				log := new(events)
				p, g := fullPool(t, log)
				ctx, end := tt.ctx()
				first := result(func() error { return p.SubmitTask(ctx, "k", &task{name: "first", log: log}) })
				notYet(t, first, "Submit on a full queue") // and first blocks before second
				second := result(func() error {
					return p.SubmitTask(context.Background(), "k", &task{name: "second", log: log})
				})
				notYet(t, second, "Submit on a full queue")

				end()
				want := []string{"run gated", "run queued", "run first", "run second"}
				if tt.want != nil {
					require.ErrorIs(t, <-first, tt.want)
					want = slices.Delete(want, 2, 3)
				}
				g.open()
				require.NoError(t, <-second)
				if tt.want == nil {
					require.NoError(t, <-first)
				}
				require.NoError(t, p.Close(context.Background()))
				assert.Equal(t, want, log.get())
			})
		})
	}
}

func TestSubmitWithDoneCtxQueuesNothing(t *testing.T) {
	t.Parallel()
	p := newPool(t, 2)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	log := new(events)
	require.ErrorIs(t, p.SubmitTask(ctx, "k", &task{name: "late", log: log}), context.Canceled)
	require.ErrorIs(t, p.Submit(ctx, "", func() { log.add("ran") }), context.Canceled)
	require.NoError(t, p.Close(context.Background()))
	assert.Empty(t, log.get())
}

// TestBlockedSubmitsEnterInOrder checks that Submits blocked on a full
// queue get in in the order they blocked, one per freed slot.
func TestBlockedSubmitsEnterInOrder(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		log := new(events)
		p, g := fullPool(t, log)
		want := []string{"run gated", "run queued"}
		var results []<-chan error
		for i := range 5 {
			name := fmt.Sprintf("blocked-%d", i)
			results = append(results, result(func() error {
				return p.SubmitTask(context.Background(), "k", &task{name: name, log: log})
			}))
			synctest.Wait() // fixes the order in which they block
			want = append(want, "run "+name)
		}
		g.open()
		for _, r := range results {
			require.NoError(t, <-r)
		}
		require.NoError(t, p.Close(context.Background()))
		assert.Equal(t, want, log.get())
	})
}

func TestSubmitAfterShutdown(t *testing.T) {
	t.Parallel()
	shutdowns := map[string]func(*workers.Pool, context.Context) error{
		"Close": (*workers.Pool).Close,
		"Stop":  (*workers.Pool).Stop,
	}
	for name, shut := range shutdowns {
		for _, key := range []string{"k", ""} {
			t.Run(fmt.Sprintf("%s/key=%q", name, key), func(t *testing.T) {
				t.Parallel()
				p := newPool(t, 2)
				require.NoError(t, shut(p, context.Background()))
				log := new(events)
				assert.ErrorIs(t, p.Submit(context.Background(), key, func() { log.add("ran") }), workers.ErrClosed)
				assert.ErrorIs(t, p.SubmitTask(context.Background(), key, &task{name: "t", log: log}), workers.ErrClosed)
				assert.Empty(t, log.get(), "a refused task is neither run nor dropped")
			})
		}
	}
}

// TestShutdownReleasesBlockedSubmit checks the race of a Submit blocked on
// a full queue with Close or Stop: the Submit returns ErrClosed, and its
// task is neither run nor dropped.
func TestShutdownReleasesBlockedSubmit(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		shut func(*workers.Pool, context.Context) error
		want []string
	}{
		{"Close", (*workers.Pool).Close, []string{"run gated", "run queued"}},
		{"Stop", (*workers.Pool).Stop, []string{"drop queued", "run gated"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) {
				log := new(events)
				p, g := fullPool(t, log)
				blocked := result(func() error {
					return p.SubmitTask(context.Background(), "k", &task{name: "blocked", log: log})
				})
				synctest.Wait()
				shut := result(func() error { return tt.shut(p, context.Background()) })
				require.ErrorIs(t, <-blocked, workers.ErrClosed)
				synctest.Wait() // Stop drops before it waits for the gated task
				g.open()
				require.NoError(t, <-shut)
				assert.Equal(t, tt.want, log.get())
			})
		})
	}
}

func TestSubmitNilPanics(t *testing.T) {
	t.Parallel()
	p := newPool(t, 1)
	assert.PanicsWithValue(t, "workers: Submit with a nil task", func() {
		_ = p.Submit(context.Background(), "k", nil)
	})
	assert.PanicsWithValue(t, "workers: SubmitTask with a nil Task", func() {
		_ = p.SubmitTask(context.Background(), "k", nil)
	})
}

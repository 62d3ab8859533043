package workers_test

import (
	"context"
	"fmt"
	"testing"
	"testing/synctest"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/keyorder/keyorder/workers"
)

// TestDropQueued checks that DropQueued drops the queued tasks of one key,
// in order, and leaves the other keys of its partition in order.
func TestDropQueued(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		p := newPool(t, 1)
		log := new(events)
		g := newGate()
		require.NoError(t, p.SubmitTask(context.Background(), "a", &task{name: "a0", log: log, run: g.run}))
		g.waitStarted(t)
		for _, name := range []string{"a1", "b1", "a2", "b2", "a3"} {
			require.NoError(t, p.SubmitTask(context.Background(), name[:1], &task{name: name, log: log}))
		}

		assert.Equal(t, 3, p.DropQueued("a"))
		assert.Equal(t, []string{"drop a1", "drop a2", "drop a3"}, log.get(), "dropped before DropQueued returned")
		assert.Equal(t, 0, p.DropQueued("a"), "nothing left to drop")
		assert.Equal(t, 0, p.DropQueued(""), "the empty key is not pinned")
		assert.Equal(t, 0, p.DropQueued("never submitted"))

		g.open()
		require.NoError(t, p.Close(context.Background()))
		assert.Equal(t, []string{"drop a1", "drop a2", "drop a3", "run a0", "run b1", "run b2"}, log.get())
	})
}

// TestDropQueuedAdmitsBlocked checks that Submits blocked on a full queue
// take the slots DropQueued frees.
func TestDropQueuedAdmitsBlocked(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		p := newPool(t, 1, workers.WithQueueSize(2))
		log := new(events)
		g := newGate()
		require.NoError(t, p.Submit(context.Background(), "x", g.run))
		g.waitStarted(t)
		for _, name := range []string{"a1", "a2"} {
			require.NoError(t, p.SubmitTask(context.Background(), "a", &task{name: name, log: log}))
		}
		var blocked []<-chan error
		for _, name := range []string{"b1", "b2", "b3"} {
			blocked = append(blocked, result(func() error {
				return p.SubmitTask(context.Background(), "b", &task{name: name, log: log})
			}))
			synctest.Wait()
		}

		assert.Equal(t, 2, p.DropQueued("a"))
		require.NoError(t, <-blocked[0])
		require.NoError(t, <-blocked[1])
		notYet(t, blocked[2], "a third Submit into a queue of two")
		g.open()
		require.NoError(t, <-blocked[2])
		require.NoError(t, p.Close(context.Background()))
		assert.Equal(t, []string{"drop a1", "drop a2", "run b1", "run b2", "run b3"}, log.get())
	})
}

// TestDropQueuedFromFailingTask is the S5 use: a task of a key that fails
// drops the key's queued tail from inside Run; other keys go on.
func TestDropQueuedFromFailingTask(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		const n = 2
		p := newPool(t, n)
		log := new(events)
		keys := keysOn(n, 0, 2)
		failing, other := keys[0], keys[1]
		g := newGate()
		require.NoError(t, p.Submit(context.Background(), other, g.run))
		for i := range 4 {
			tk := &task{name: fmt.Sprintf("f%d", i), log: log}
			if i == 1 {
				tk.run = func() { log.add("dropped %d", p.DropQueued(failing)) }
			}
			require.NoError(t, p.SubmitTask(context.Background(), failing, tk))
			require.NoError(t, p.SubmitTask(context.Background(), other, &task{name: fmt.Sprintf("o%d", i), log: log}))
		}
		g.open()
		require.NoError(t, p.Close(context.Background()))
		assert.Equal(t, []string{
			"run f0", "run o0",
			"drop f2", "drop f3", "dropped 2", "run f1", "run o1",
			"run o2", "run o3",
		}, log.get())
	})
}

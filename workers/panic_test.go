package workers_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"runtime"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/keyorder/keyorder/workers"
)

// report is one call of a panic handler.
type report struct {
	key       string
	recovered any
	stack     string
}

// panicky panics with v; its name shows in the reported stack.
func panicky(v any) { panic(v) }

// droppedPanicky is a Task whose Drop panics.
type droppedPanicky struct{}

func (droppedPanicky) Run()  {}
func (droppedPanicky) Drop() { panicky("drop failed") }

func TestPanicIsRecoveredAndReported(t *testing.T) {
	t.Parallel()
	errBoom := errors.New("boom")
	tests := []struct {
		name  string
		value any
		check func(t *testing.T, recovered any)
	}{
		{"string", "boom", func(t *testing.T, r any) { assert.Equal(t, "boom", r) }},
		{"error", errBoom, func(t *testing.T, r any) { assert.ErrorIs(t, r.(error), errBoom) }},
		{"nil", nil, func(t *testing.T, r any) {
			var pn *runtime.PanicNilError
			assert.ErrorAs(t, r.(error), &pn)
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			reports := make(chan report, 2)
			p := newPool(t, 1, workers.WithPanicHandler(func(key string, r any, stack []byte) {
				reports <- report{key, r, string(stack)}
			}))
			log := new(events)
			require.NoError(t, p.Submit(context.Background(), "k1", func() { panicky(tt.value) }))
			require.NoError(t, p.SubmitTask(context.Background(), "k2", &task{name: "next", log: log}))
			require.NoError(t, p.Close(context.Background()))

			require.Len(t, reports, 1)
			r := <-reports
			assert.Equal(t, "k1", r.key)
			tt.check(t, r.recovered)
			assert.Contains(t, r.stack, "workers_test.panicky", "the stack is the panic's")
			assert.Equal(t, []string{"run next"}, log.get(), "the partition went on")
		})
	}
	t.Run("in Drop", func(t *testing.T) {
		t.Parallel()
		reports := make(chan report, 4)
		p := newPool(t, 1, workers.WithPanicHandler(func(key string, r any, stack []byte) {
			reports <- report{key, r, string(stack)}
		}))
		g := newGate()
		require.NoError(t, p.Submit(context.Background(), "k", g.run))
		g.waitStarted(t)
		require.NoError(t, p.SubmitTask(context.Background(), "d1", droppedPanicky{}))
		require.NoError(t, p.SubmitTask(context.Background(), "d2", droppedPanicky{}))
		assert.Equal(t, 2, p.DropQueued("d1")+p.DropQueued("d2"), "DropQueued goes on after a panic")
		g.open()
		require.NoError(t, p.Close(context.Background()))
		require.Len(t, reports, 2)
		for _, key := range []string{"d1", "d2"} {
			r := <-reports
			assert.Equal(t, key, r.key)
			assert.Equal(t, "drop failed", r.recovered)
		}
	})
}

// TestGoexitInTaskKeepsPartition checks that a task calling runtime.Goexit,
// as testing.T.FailNow does, ends neither its partition nor the pool.
func TestGoexitInTaskKeepsPartition(t *testing.T) {
	t.Parallel()
	p := newPool(t, 1)
	log := new(events)
	require.NoError(t, p.SubmitTask(context.Background(), "k", &task{name: "exits", log: log, run: runtime.Goexit}))
	require.NoError(t, p.SubmitTask(context.Background(), "k", &task{name: "next", log: log}))
	require.NoError(t, p.Close(context.Background()))
	assert.Equal(t, []string{"run next"}, log.get())
}

// TestDefaultPanicHandlerLogs swaps the default slog logger, so it must not
// run in parallel with other tests.
func TestDefaultPanicHandlerLogs(t *testing.T) {
	var buf bytes.Buffer
	old := slog.Default()
	slog.SetDefault(slog.New(slog.NewTextHandler(&buf, nil)))
	t.Cleanup(func() { slog.SetDefault(old) })

	p, err := workers.New(1)
	require.NoError(t, err)
	require.NoError(t, p.Submit(context.Background(), "customer-9", func() { panicky("boom") }))
	ran := make(chan struct{})
	require.NoError(t, p.Submit(context.Background(), "customer-9", func() { close(ran) }))
	require.NoError(t, p.Close(context.Background()))
	select {
	case <-ran:
	default:
		require.FailNow(t, "Close returned before the task after the panic ran")
	}

	out := buf.String()
	assert.Contains(t, out, "level=ERROR")
	assert.Contains(t, out, "task panicked")
	assert.Contains(t, out, "key=customer-9")
	assert.Contains(t, out, "panic=boom")
	assert.Contains(t, out, "workers_test.panicky")
}

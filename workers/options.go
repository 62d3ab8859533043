package workers

import (
	"fmt"
	"log/slog"
)

// Limits that [New] enforces. Queues grow as they fill, so these keep a
// typo from letting one grow to gigabytes; a queue entry is 24 bytes.
const (
	maxPartitions    = 1 << 16
	maxQueueSize     = 1 << 20
	defaultQueueSize = 64
)

// An Option configures a [Pool]. [New] applies the options in order, then
// checks the result once; a later option overrides an earlier one.
type Option func(*config)

type config struct {
	queueSize   int
	concurrency int
	onPanic     func(key string, recovered any, stack []byte)
}

// WithQueueSize sets how many tasks each partition holds waiting to run,
// not counting the one it is running. [Pool.Submit] blocks while the queue
// of its partition is full: that is the pool's back-pressure.
//
// This overrides the default of 64. The range is 1 to 1,048,576. A queue
// takes memory as it fills, 24 bytes an entry, and lets it go once it has
// drained.
func WithQueueSize(size int) Option {
	return func(c *config) { c.queueSize = size }
}

// WithConcurrency sets how many tasks the pool runs at once, which is also
// the most goroutines it starts. Partitions take turns on them: a partition
// with a task waits for a free one, oldest first. Since a partition runs
// one task at a time, a value above the number of partitions acts as that
// number.
//
// This overrides the default, the number of partitions. n must be at least
// 1.
func WithConcurrency(n int) Option {
	return func(c *config) { c.concurrency = n }
}

// WithPanicHandler sets the function told about a task (or a [Task.Drop])
// that panicked. The pool recovers the panic, calls h with the task's key,
// the value passed to panic and the goroutine's stack at the panic, then
// goes on with the partition's next task. h runs on the goroutine that ran
// the task, so the partition waits for it.
//
// A handler that panics itself is not recovered: it crashes the process, as
// an unrecovered panic does. A handler can re-panic to get that back.
//
// This overrides the default, which logs the key, the value and the stack
// at error level with [slog.Default]. h must not be nil.
func WithPanicHandler(h func(key string, recovered any, stack []byte)) Option {
	return func(c *config) { c.onPanic = h }
}

// logPanic is the default panic handler.
func logPanic(key string, recovered any, stack []byte) {
	slog.Error("workers: task panicked", "key", key, "panic", recovered, "stack", string(stack))
}

func newConfig(n int, opts []Option) (config, error) {
	c := config{queueSize: defaultQueueSize, concurrency: n, onPanic: logPanic}
	for _, o := range opts {
		if o != nil {
			o(&c)
		}
	}
	switch {
	case n < 1 || n > maxPartitions:
		return c, fmt.Errorf("%w: %d partitions, want 1 to %d", ErrInvalidConfig, n, maxPartitions)
	case c.queueSize < 1 || c.queueSize > maxQueueSize:
		return c, fmt.Errorf("%w: queue size %d, want 1 to %d", ErrInvalidConfig, c.queueSize, maxQueueSize)
	case c.onPanic == nil:
		return c, fmt.Errorf("%w: nil panic handler", ErrInvalidConfig)
	case c.concurrency < 1:
		return c, fmt.Errorf("%w: concurrency %d, want at least 1", ErrInvalidConfig, c.concurrency)
	}
	c.concurrency = min(c.concurrency, n)
	return c, nil
}

// Package workers runs tasks on key-hashed partitions: the tasks of one key
// run one at a time, in the order they were submitted, while different keys
// run in parallel. It knows nothing of Pub/Sub; the subscriber uses it to
// keep each ordering key on one worker (S3). Rule numbers refer to the
// ordering contract in the project's DESIGN.md.
//
//	pool, err := workers.New(8)
//	if err != nil {
//		return err
//	}
//	for _, o := range orders {
//		if err := pool.Submit(ctx, o.Customer, func() { ship(o) }); err != nil {
//			return err
//		}
//	}
//	return pool.Close(ctx) // runs what is queued, then stops
//
// # Partitions
//
// A [Pool] has n partitions. A task with a non-empty key goes to partition
// [ordering.Partition](key, n), a pinned hash, so a key keeps its
// partition in every process. Tasks with the empty key are not ordered and
// go to the partitions in turn. The tasks of one partition never run at
// once, and run in submit order.
//
// A partition is not a goroutine. Runners, at most [WithConcurrency] of
// them (n by default), take the partitions that have a task ready, oldest
// first, one task at a time. A long task holds its own partition and one
// runner, and delays only the keys of that partition (S9). A partition
// takes memory only while it has work, so n may be large: the subscriber
// uses 65,536 partitions over a few runners, so that few keys share one.
//
// # Back-pressure
//
// [Pool.Submit] blocks while the queue of its partition is full, and returns
// ctx.Err() if ctx ends first, with the queue unchanged. The queue size is
// [WithQueueSize].
//
// # Panics
//
// A task that panics kills neither the pool nor the process: the panic is
// recovered, reported to the handler set by [WithPanicHandler] (by default
// it is logged), and the partition goes on with its next task.
//
// # Shutdown and dropped tasks
//
// [Pool.Close] stops accepting tasks, runs what is queued and waits for the
// partition goroutines to exit. [Pool.Stop] drops what is queued instead.
// Both are bounded by a ctx; when Close's ctx ends, it drops what is still
// queued. A task submitted with [Pool.SubmitTask] implements [Task], whose
// Drop the pool calls instead of Run when it discards the task, so that
// every accepted task is either run or dropped, exactly once; a func given
// to [Pool.Submit] is dropped silently.
// [Pool.DropQueued] drops the queued tasks of one key, for a key that must
// not go on after a failure (S5).
package workers

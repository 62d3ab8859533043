package workers

import "runtime/debug"

// A Task is work that wants to know when the pool gives up on it. Once
// [Pool.SubmitTask] has returned nil for a task, the pool calls exactly one
// of its methods, exactly once.
//
// A type with a pointer receiver, such as a subscriber's record of one
// delivery, implements Task without an allocation per submit, which a
// closure would cost.
type Task interface {
	// Run does the work. It runs on the goroutine of the task's partition,
	// after every task submitted to that partition before it has returned
	// or been dropped.
	Run()

	// Drop is called instead of Run when the pool discards the task before
	// it started: by [Pool.Stop], by [Pool.Close] whose ctx ended, or by
	// [Pool.DropQueued]. It runs on the goroutine that called that method,
	// before the method returns. A subscriber nacks the message here (S5,
	// S7). Drop must not block for long, and must not wait for a task of
	// the same pool.
	Drop()
}

// funcTask adapts the func of [Pool.Submit] to [Task]. A func value is one
// pointer, so converting it to the interface does not allocate.
type funcTask func()

func (f funcTask) Run()  { f() }
func (f funcTask) Drop() {}

// entry is one accepted task and the key it was submitted with, which the
// panic handler is told.
type entry struct {
	key  string
	task Task
}

// invoke calls f, the Run or Drop of a task of key. A panic in f is
// recovered and reported to onPanic, so that it kills neither the partition
// nor the process. (runtime.Goexit is not a panic: partition.run deals with
// it.)
func invoke(key string, f func(), onPanic func(string, any, []byte)) {
	defer func() {
		// Since Go 1.21 panic(nil) recovers a *runtime.PanicNilError, so
		// a nil r means f returned normally.
		if r := recover(); r != nil {
			onPanic(key, r, debug.Stack())
		}
	}()
	f()
}

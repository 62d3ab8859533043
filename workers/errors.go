package workers

import "errors"

// ErrClosed is returned by [Pool.Submit] and [Pool.SubmitTask] once
// [Pool.Close] or [Pool.Stop] has been called, including to a Submit that
// was blocked on a full queue when the pool closed. The task was not
// accepted: the pool will neither run nor drop it.
var ErrClosed = errors.New("worker pool closed")

// ErrInvalidConfig is returned, wrapped with the offending value, by [New]
// when the partition count or an [Option] is out of its documented range.
var ErrInvalidConfig = errors.New("invalid worker pool configuration")

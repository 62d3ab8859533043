package engine

import (
	"errors"
	"fmt"
	"time"
)

// PanicError is the error a handler's panic becomes. It is retried and
// reported like any handler error (S5).
type PanicError struct {
	// Value is what the handler panicked with.
	Value any
	// Stack is the handler goroutine's stack at the panic.
	Stack []byte
}

func (e *PanicError) Error() string {
	return fmt.Sprintf("keyorder/subscriber: handler panicked: %v", e.Value)
}

// Unwrap returns Value if it is an error, such as a runtime error.
func (e *PanicError) Unwrap() error {
	err, _ := e.Value.(error)
	return err
}

// ErrHandlerExited is the error a handler call ends with when it calls
// runtime.Goexit, as t.FailNow does in a test: the call did not return, so
// the message is not processed. It is retried and reported like any
// handler error (S5, S11).
var ErrHandlerExited = errors.New("keyorder/subscriber: handler called runtime.Goexit")

// PermanentError is the error subscriber.Permanent returns.
type PermanentError struct{ Err error }

func (e *PermanentError) Error() string { return "permanent: " + e.Err.Error() }

// Unwrap returns the wrapped error.
func (e *PermanentError) Unwrap() error { return e.Err }

// RetryAfterError is the error subscriber.RetryAfter returns.
type RetryAfterError struct {
	Delay time.Duration
	Err   error
}

func (e *RetryAfterError) Error() string {
	return fmt.Sprintf("retry after %v: %v", e.Delay, e.Err)
}

// Unwrap returns the wrapped error.
func (e *RetryAfterError) Unwrap() error { return e.Err }

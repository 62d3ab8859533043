package subscriber

import (
	"errors"
	"fmt"
)

// ErrNotFound is returned by [Open] when the subscription does not exist.
var ErrNotFound = errors.New("keyorder/subscriber: subscription not found")

// ErrTopicMismatch is returned by [CreateWithTopic] when the subscription
// exists but is attached to another topic (or to a deleted one).
var ErrTopicMismatch = errors.New("keyorder/subscriber: subscription is attached to another topic")

// ErrReceiving is returned by [Subscription.Receive] when another Receive
// on the same Subscription is still running.
var ErrReceiving = errors.New("keyorder/subscriber: Receive already running on this subscription")

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

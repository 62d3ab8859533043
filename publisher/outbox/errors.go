package outbox

import (
	"errors"
	"fmt"
)

// prefix starts the text of every error of this package.
const prefix = "keyorder/outbox: "

// ErrInvalidConfig is returned by [New] and [NewRelay], wrapped with what
// is wrong: a nil database or publisher, an unknown [Dialect], a nil
// option or one out of its documented range, or [WithShards] that
// disagrees with the count the database recorded when the outbox was
// created. [Relay.Run] returns it for a relay whose publisher's topic is
// not the one the outbox's relays publish to.
var ErrInvalidConfig = errors.New(prefix + "invalid configuration")

// ErrStamped is returned by [NewRelay] for a publisher that stamps its
// messages: the relay stamps them itself, as the outbox's producer, so
// that a re-send carries the same stamp and is a copy (S12). Make the
// relay's publisher with [publisher.WithoutStamps].
var ErrStamped = errors.New(prefix + "the relay's publisher stamps its messages; make it with publisher.WithoutStamps()")

// ErrNilTx is returned by [Outbox.Add] for a nil *sql.Tx. Nothing is
// written.
var ErrNilTx = errors.New(prefix + "nil transaction")

// ErrNoKey is returned by [Outbox.Add] for an empty key: an outbox
// publishes key by key, in order, and a message without a key has no
// order to keep. Nothing is written.
var ErrNoKey = errors.New(prefix + "empty key")

// ErrKeyNUL is the Err of the [*publisher.ValidationError] that
// [Outbox.Add] returns for a key with a NUL byte, which neither SQLite's
// nor PostgreSQL's text holds. Nothing is written, and the caller's
// transaction is as it was.
var ErrKeyNUL = errors.New(prefix + "key has a NUL byte")

// ErrKeyExhausted is returned by [Outbox.Add] when a key has been given
// 2^32-1 numbers, the last of the stamps' epoch 0. Nothing is written.
var ErrKeyExhausted = errors.New(prefix + "key has used every sequence number")

// ErrRunning is returned by [Relay.Run] while another Run of the same
// Relay is under way.
var ErrRunning = errors.New(prefix + "relay is running already")

// A DBError reports a statement of the outbox's that the database refused.
// [Outbox.Add] returns it when the caller's transaction could not take
// the event, which the caller should then roll back; [New] when it could
// not create the tables.
type DBError struct {
	Op  string // what the outbox was doing, e.g. "number the key"
	Err error  // the driver's error
}

func (e *DBError) Error() string { return fmt.Sprintf(prefix+"%s: %v", e.Op, e.Err) }

// Unwrap returns the driver's error.
func (e *DBError) Unwrap() error { return e.Err }

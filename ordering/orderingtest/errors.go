package orderingtest

import "errors"

// ErrInvalidConfig is returned, wrapped with the offending value, by New
// and Start for an option out of its documented range.
var ErrInvalidConfig = errors.New("orderingtest: invalid server configuration")

// ErrNoSubscription is returned by Server methods given the name of a
// subscription that does not exist.
var ErrNoSubscription = errors.New("orderingtest: no such subscription")

// ErrUnordered is returned by Server.RedeliverKey for a subscription without
// message ordering: only ordered subscriptions redeliver a key's tail.
var ErrUnordered = errors.New("orderingtest: subscription does not order messages")

// ErrViolation is wrapped by the error Report.Err returns when a key's
// records are out of order, duplicated where that is not allowed, missing
// or unexpected.
var ErrViolation = errors.New("orderingtest: order violated")

package fakepubsub

import "errors"

// ErrNoSubscription is returned by Server methods given the name of a
// subscription that does not exist.
var ErrNoSubscription = errors.New("fakepubsub: no such subscription")

// ErrUnordered is returned by Server.RedeliverKey for a subscription without
// message ordering: only ordered subscriptions redeliver a key's tail.
var ErrUnordered = errors.New("fakepubsub: subscription does not order messages")

// Package push is the push door of package subscriber: the HTTP endpoint
// a push subscription's service POSTs to, its authentication, the
// decoding of a request, the per-key gate, and the answer, which is the
// ack. Each request runs through the engine's one call path
// (subscriber/internal/engine) by the engine's PushDoor, which calls in
// the key's lane, keeps a RetryAfter's wait within the request, and counts
// the outcome the answer reports; parking, where the subscription has it,
// is reached through the Parking and Parked interfaces, which
// subscriber/internal/parking implements.
package push

// Package push is the push door of package subscriber: the HTTP endpoint
// a push subscription's service POSTs to, its authentication, the
// decoding of a request, the per-key gate, and the answer, which is the
// ack. Each request runs through the engine's one call path
// (subscriber/internal/engine) with a door of its own; parking, where the
// subscription has it, is reached through the Parking and Parked
// interfaces, which package subscriber implements.
package push

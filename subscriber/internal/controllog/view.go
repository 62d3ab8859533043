package controllog

import "time"

// A View is the part of the state read on the hot path, for every
// delivery: which keys are parked, and which messages recent releases
// ran. It is immutable, replaced as a whole when either changes, so a
// reader needs no lock.
type View struct {
	parked   map[string]string    // key → park ID
	since    map[string]time.Time // key → when this Log first saw its park
	released map[string]string    // message of a recently ended park → park
}

// ParkID returns key's park ID, "" if it is not parked.
func (v *View) ParkID(key string) string { return v.parked[key] }

// Seen returns when this Log first applied key's park, by this process's
// clock (monotonic), and so no earlier than the park was recorded; zero if
// the key is not parked. A process that acks a parked key's messages no
// sooner than a bound after it lets the others know the park by a marker
// of theirs sent within that bound (subscriber's barrier).
func (v *View) Seen(key string) time.Time { return v.since[key] }

// Released reports whether the message id ran in the release of a park
// that has ended within the last hour: the service may deliver it again
// after a lost ack, and it must not run twice.
func (v *View) Released(id string) bool {
	_, ok := v.released[id]
	return ok
}

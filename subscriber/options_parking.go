package subscriber

import (
	"time"

	"github.com/keyorder/keyorder/internal/resource"
)

// WithParking makes parking the failure policy, with topicID (an ID or a
// full name) as the parking topic. [CreateWithTopic] and [Open] create it
// when it is missing, with 31 days of message retention, and with it the
// control topic, named after the subscription with "-parking-control",
// where every process receiving the subscription keeps the state. See
// [Subscription.Parked], [Subscription.Release] and
// [Subscription.RequestRelease]: a program that runs no Receive, such as
// an operator's command, may release a key too, and a Receive of the
// subscription carries the release out.
//
// A message that fails for good (its attempts ran out, or the handler
// returned [Permanent]) parks its key: it and every later message of the
// key are copied, in order and with their key, to the parking topic, with
// the attributes [AttrParkID], [AttrMessageID], [AttrSubscription],
// [AttrPublishTime], [AttrAttempts] and [AttrError] added, then acked on
// the subscription. The key's new messages follow them for as long as it
// is parked, on every process, across restarts; no message of the key runs
// before its release. Other keys go on at full speed (S9).
//
// Parking needs an ordered subscription, and every process receiving it
// must use it, with the same topic. It wins over the subscription's
// dead-letter policy: a message parked is acked, never dead-lettered. The
// default is no parking: a key is held until its failed message comes back
// (S5).
func WithParking(topicID string) Option {
	err := resource.Topic(topicID)
	return checked(err == nil, func(c *config) { c.parking = topicID }, "WithParking: %v", err)
}

// DefaultParkingWait is the default of [WithParkingWait].
const DefaultParkingWait = 2 * time.Second

// maxParkingWait bounds WithParkingWait: a process that dies while it
// waits leaves what it parked leased for at least about this long (the
// official client renews a lease of at least 10 s when 5 s are left), and
// the key must not move to another process before the wait is over.
const maxParkingWait = 5 * time.Second

// WithParkingWait sets D, the bound on which parking's guarantee across
// processes rests (the Parking section of DESIGN.md): a process that parks
// a key waits D, from when it learned of the park, before it acks what it
// parked, so that the key's next message reaches another process only
// once the park is D old; and a process runs a message of a key new to it
// at once when a marker it sent through the control log within the last
// D has come back, which shows it every park older than D, and otherwise
// waits for one. While it receives keys new to it, a process sends itself
// a marker every D/4, without waiting for it; an idle one sends nothing.
//
// A larger D keeps a process's view fresh with fewer markers and makes
// each park's ack later; a smaller one the reverse. When the control
// topic's round trip exceeds about 3D/4, new keys wait for a marker, as if
// D were 0: slower, never unsafe. [WithDrainTimeout] must be at least D,
// so that a shutdown lets a park's wait finish: a shorter one, and
// WithParkingWait without [WithParking], are refused. The default is
// [DefaultParkingWait]; d is more than 0 and at most 5 s.
func WithParkingWait(d time.Duration) Option {
	return checked(d > 0 && d <= maxParkingWait, func(c *config) { c.parkingWait, c.parkingWaitSet = d, true },
		"WithParkingWait(%v): need more than 0 and at most %v", d, maxParkingWait)
}

package parking

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"time"
	"unicode/utf8"

	"cloud.google.com/go/pubsub/v2"

	"github.com/keyorder/keyorder/publisher"
	"github.com/keyorder/keyorder/subscriber/internal/barrier"
	"github.com/keyorder/keyorder/subscriber/internal/controllog"

	"github.com/keyorder/keyorder/subscriber/internal/engine"
)

// Parking (WithParking) is a failure policy for poison messages: a message
// that fails for good parks its key. The message and every later message
// of the key are copied, in order, to the parking topic and acked on the
// subscription, and the key's new messages follow them there until
// Subscription.Release runs them through the handler. Other keys go on.
//
// The state, which keys are parked and which of their messages, is kept in
// Pub/Sub: the control log on a control topic, replayed and followed by
// every Receive. The log is a package of its own, internal/controllog,
// which knows nothing of lanes: parking records events in it (a park, a
// forward, a release's claim, progress, stop and unpark) and reads their
// verdicts, its view of the parked keys, and its markers' round trips.
// This file holds the Receive's part, the parking component (Parking),
// what it needs of the subscription (Config, Topics; the facade sets the
// topics up when the Subscription is made), and the component's methods
// that park a key: the hooks
// the lanes and push call and the moves of a key's deliveries to the
// parking topic, on flights (the lanes' side of them is the engine's:
// engine/lane_park.go, lane_failure.go);
// park_release.go holds the methods that run it: its loop and its stop,
// the barrier's markers, which go through the log (internal/barrier is the
// barrier itself), releases and the release requests Receives carry out,
// beside Parked and Release; park_request.go holds RequestRelease.
//
// A lane's deliveries go through the parking component in three places:
//   - accept: a delivery of a key the lane was not holding anything of
//     waits for the barrier (internal/barrier), so that it cannot run
//     before the Receive has seen a park of its key by another process;
//     one of a message released from parking lately is acked unrun.
//   - next: a lane whose key is parked, or that has just failed for good,
//     sends its queued deliveries on a flight instead of running them.
//   - failed: a message that fails for good parks its key, instead of
//     being nacked with its tail (S5).

// The attributes of a parked message, besides its own (the facade's
// AttrParkID and the others document them).
const (
	AttrParkID       = "keyorder-park-id"
	AttrMessageID    = "keyorder-message-id"
	AttrSubscription = "keyorder-subscription"
	AttrPublishTime  = "keyorder-publish-time"
	AttrAttempts     = "keyorder-attempts"
	AttrError        = "keyorder-error"
)

// Parking is a Receive's part in parking. It starts before the official
// Receive and stops after it.
//
// Goroutines: run, the barrier's loop, started by Start and waited
// for by stop; the control log's, stopped by stop; one per flight, counted
// in flights and waited for by shutdown and stop; and the callers of
// Release, the watch of release requests and its runs, counted in rel.
type Parking struct {
	cfg  Config
	door *engine.ParkingDoor
	log  *controllog.Log
	out  *publisher.Publisher // copies to the parking topic
	b    *barrier.Barrier

	// ops bounds publishes and waits; cancelled when a shutdown has
	// waited the drain timeout for flights, and at stop.
	ops       context.Context
	cancelOps context.CancelFunc
	flights   sync.WaitGroup
	rel       releases
	// fail cancels the Receive with the cause when the control log can
	// no longer be followed.
	fail     context.CancelCauseFunc
	stopLoop chan struct{} // closed by stop
	loopDone chan struct{} // closed when run returns
}

// fastPublish sends copies with little batching delay: a flight waits for
// its copies before the key's deliveries are acked.
var fastPublish = func() pubsub.PublishSettings {
	s := pubsub.DefaultPublishSettings
	s.DelayThreshold = time.Millisecond
	s.Timeout = controllog.PublishTimeout // as the control log's: a flight waits for them
	return s
}()

// Config is what parking needs of its subscription, given by the facade
// at start.
type Config struct {
	Client *pubsub.Client
	Name   string        // the subscription's full name
	Topics *Topics       // its parking and control topics
	Wait   time.Duration // the parking wait (WithParkingWait)
	// Drain is the drain timeout (WithDrainTimeout), which bounds a
	// Receive's control log's Close.
	Drain time.Duration
	// Log is the subscription's logger, its name attached; Backoff the
	// wait before a failed step's next try, WithBackoff's doubling.
	Log     *slog.Logger
	Backoff func(failures int) time.Duration
}

// Topics are the topics of a subscription's parking, set up when the
// Subscription is made.
type Topics struct {
	Park      string        // where parked messages go
	Retention time.Duration // the control topic's message retention
}

// LogConfig is the configuration of the control log of sub, whose Close,
// or failed Open, waits drain for its events; only Receives publish
// snapshots.
func (t *Topics) LogConfig(sub string, drain time.Duration, snapshots bool) controllog.Config {
	return controllog.Config{Subscription: sub, Retention: t.Retention, Lease: releaseLease, Snapshots: snapshots, Drain: drain}
}

// seekMargin is how far before a park began its release seeks the parking
// topic, for clocks that differ between the service's machines.
const seekMargin = time.Minute

// Start starts the parking of door's engine, and attaches it, the lanes'
// hooks into it: it opens the control log, which replays it until it is
// caught up, then follows it. It returns the parking, for its door (Receive, the push
// endpoint) to hold, and the context Receive must use, cancelled if the
// log can no longer be followed. If parking cannot start, it returns a nil
// context, with the error, or with nil if ctx ended meanwhile: Receive
// then returns at once, as it would have.
func Start(ctx context.Context, cfg Config, door *engine.ParkingDoor) (*Parking, context.Context, error) {
	// A failed Open gives up on the server within the drain timeout and
	// a second, so that a Receive catching up returns within
	// ShutdownBound of its ctx's end (S7).
	lg, err := controllog.Open(ctx, cfg.Client, cfg.Topics.LogConfig(cfg.Name, cfg.Drain, true))
	if err != nil {
		if ctx.Err() != nil {
			return nil, nil, nil
		}
		return nil, nil, fmt.Errorf("keyorder/subscriber: replaying the parking control log: %w", err)
	}
	// A parked copy keeps its original's stamp (engine.ParkingDoor.Copy):
	// the publisher does not stamp (S12).
	out, err := publisher.New(cfg.Client, cfg.Topics.Park, publisher.WithPublishSettings(fastPublish), publisher.WithoutStamps())
	if err != nil {
		_ = lg.Close()
		return nil, nil, err
	}
	p := &Parking{cfg: cfg, door: door, log: lg, out: out, stopLoop: make(chan struct{}), loopDone: make(chan struct{})}
	p.b = barrier.New(cfg.Wait)
	p.ops, p.cancelOps = context.WithCancel(context.Background())
	rctx, cancel := context.WithCancelCause(ctx)
	p.fail = cancel
	door.Attach(p, p.cancelOps) // a shutdown gives up on ops at the drain timeout
	go p.run()
	p.startRequests() // park_release.go
	return p, rctx, nil
}

// Fence returns the barrier marker a delivery that arrived at now, at a
// lane holding nothing of its key, must wait for: another process may have
// had the key, and parked it, before the service sent it. 0 while the view
// is fresh.
func (p *Parking) Fence(now time.Time) uint64 { return p.b.Arrived(now) }

// ParkID returns the park in force for key in the Receive's view, "" if
// the key is not parked.
func (p *Parking) ParkID(key string) string { return p.log.View().ParkID(key) }

// Wait registers wake to be called once the barrier's marker fence has
// come back, and reports false if it has already.
func (p *Parking) Wait(fence uint64, wake func()) bool { return p.b.Wait(fence, wake) }

// ReleasedLately reports whether the message id ran in the release of a
// park that has ended, within the last hour: the service may send it
// again after a lost ack, and it must not run twice (S6 across
// processes).
func (p *Parking) ReleasedLately(id string) bool {
	return p.log.View().Released(id)
}

// move moves msgs, deliveries of key as the engine copies them
// (engine.ParkingDoor.Copy), to the parking topic: it parks the key first
// if park is "" (cause says why), publishes their copies, in order,
// records them under the park, and waits for the park to ripen. It reports
// whether they are parked, and so may be acked, and whether this call
// parked the key. It reports false with a nil error when the log
// refused them (the key was released meanwhile, or its new park ended at
// once): they are then to run, or move again, as the view now says.
func (p *Parking) move(ctx context.Context, key string, msgs []*pubsub.Message, park string, cause *engine.ParkCause) (parked, parkedIt bool, err error) {
	if cause != nil && park == "" {
		v, err := p.log.Record(ctx, controllog.Event{Kind: controllog.Park, Key: key, Msg: cause.ID, Err: cause.Err})
		if err != nil {
			return false, false, err
		}
		if park = v.ParkID; park == "" {
			return false, false, nil
		}
		parkedIt = v.Applied
	}
	results := make([]*publisher.Result, len(msgs))
	for i, m := range msgs {
		results[i] = p.out.Publish(ctx, p.copyOf(m, park, cause), publisher.WithOrderingKey(key))
	}
	ids := make([]string, len(msgs))
	for i, res := range results {
		if _, err := res.Get(ctx); err != nil {
			return false, parkedIt, err
		}
		ids[i] = msgs[i].ID
	}
	// The copies are stored before the log says they are parked: a
	// release never waits for a copy that does not exist.
	v, err := p.log.Record(ctx, controllog.Event{Kind: controllog.Forward, Key: key, ParkID: park, IDs: ids})
	if err != nil || !v.Applied {
		return false, parkedIt, err
	}
	if err := p.ripen(ctx, key); err != nil {
		return false, parkedIt, err
	}
	return true, parkedIt, nil
}

// ripen waits, before what was parked of key is acked, until the park is
// the parking wait old by this process's clock, from when it learned of
// it: only then may the key's next message go to another process, whose
// view is then sure to hold the park (internal/barrier). It returns
// ctx.Err() if ctx ends first; the flight's deliveries are then not acked.
func (p *Parking) ripen(ctx context.Context, key string) error {
	seen := p.log.View().Seen(key)
	if seen.IsZero() {
		seen = time.Now() // unparked meanwhile: wait the whole bound
	}
	wait := p.b.Window() - time.Since(seen)
	if wait <= 0 {
		return nil
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// copyOf is the parking topic's copy of m, a message as the engine copies
// it, parked under park; cause is why the key parked, if it did with this
// move.
func (p *Parking) copyOf(m *pubsub.Message, park string, cause *engine.ParkCause) *publisher.Message {
	headers := m.Attributes // the copy's own
	headers[AttrParkID] = park
	headers[AttrMessageID] = m.ID
	// The rest as room allows: the service takes 100 attributes.
	extra := [][2]string{
		{AttrSubscription, p.cfg.Name},
		{AttrPublishTime, m.PublishTime.UTC().Format(time.RFC3339Nano)},
		{AttrAttempts, "0"},
	}
	if c := cause; c != nil && c.ID == m.ID {
		extra[2][1] = strconv.Itoa(c.Attempt)
		extra = append(extra, [2]string{AttrError, truncateUTF8(c.Err, publisher.MaxAttributeValueBytes)})
	}
	for _, kv := range extra {
		if len(headers) < publisher.MaxAttributes {
			headers[kv[0]] = kv[1]
		}
	}
	return &publisher.Message{Data: m.Data, Headers: headers}
}

// Ops ends when a shutdown, or the Close of a push endpoint, gives up on
// what parking has under way: the moves to the parking topic.
func (p *Parking) Ops() context.Context { return p.ops }

// DivertPush is steps 1 and 2 above, for j, a push of a keyed message: it
// reports whether j was parked, and so is to be acked, or, with an error,
// that it could not be told.
func (p *Parking) DivertPush(ctx context.Context, j *engine.Job) (bool, error) {
	if fence := p.b.Arrived(time.Now()); fence != 0 {
		if err := p.syncTo(ctx, fence); err != nil {
			return false, err
		}
	}
	m := p.door.Copy(j)
	park := p.log.View().ParkID(m.OrderingKey)
	if park == "" {
		return false, nil
	}
	parked, _, err := p.move(ctx, m.OrderingKey, []*pubsub.Message{m}, park, nil)
	return parked, err
}

// ParkPush is step 3's end: j, a push that failed for good, parks its key.
// It reports whether j was parked, and so is to be acked, and the cause
// to tell of if this call parked the key.
func (p *Parking) ParkPush(ctx context.Context, j *engine.Job, err error) (bool, *engine.ParkCause, error) {
	cause := engine.CauseOf(j, err)
	m := p.door.Copy(j)
	parked, parkedIt, merr := p.move(ctx, m.OrderingKey, []*pubsub.Message{m}, "", cause)
	if !parkedIt {
		cause = nil
	}
	return parked, cause, merr
}

// Fly moves jobs, a lane's deliveries of key, to the parking topic on a
// flight of its own goroutine, counted in flights: the copies are
// published, in order, then recorded in the control log, and only then
// acked on the subscription (by land, the lane's: engine/lane_failure.go).
// Until it lands the lane runs nothing, so the key's later deliveries wait
// behind it. If the key is not parked yet (park is ""), the flight parks
// it first, and tells of the park once it has landed, so that a callback
// cannot hold it up.
func (p *Parking) Fly(key string, jobs []*engine.Job, park string, cause *engine.ParkCause, land func(parked bool, err error)) {
	p.flights.Add(1)
	go func() {
		defer p.flights.Done()
		msgs := make([]*pubsub.Message, len(jobs))
		for i, j := range jobs {
			msgs[i] = p.door.Copy(j)
		}
		parked, parkedIt, err := p.move(p.ops, key, msgs, park, cause)
		land(parked, err)
		if parkedIt {
			p.door.Parked(key, cause, time.Now())
		}
	}()
}

// truncateUTF8 cuts s to at most n bytes on a character boundary.
func truncateUTF8(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

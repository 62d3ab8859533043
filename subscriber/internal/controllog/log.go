// Package controllog is the control log of parking: the parking state of
// a subscription, kept in Pub/Sub itself.
//
// The log is the events of every process that receives the subscription,
// on one control topic, all with one ordering key, so that the service
// gives them one total order. Every process replays the log when it opens
// it and follows it while it runs, applying each event in that order to
// the same state machine: which keys are parked, under which park ID,
// which message IDs belong to each park, which ones a release has run,
// and who is releasing. The state is a function of the log: processes
// that have applied the same events agree on it, and each event's Verdict
// (applied or refused) is the same everywhere. A writer learns the
// verdict of its own event when it comes back.
//
// Events that read the state before they change it (a park when the key
// is free, an unpark when every parked message has run) are therefore
// compare-and-set operations on the log: two processes that race get one
// winner, decided by the order the service gives.
//
// A Log is one process's part: [Open] replays the log and follows it;
// [Log.Record] writes an event and returns its verdict, [Log.Publish]
// writes one without waiting for it, and [Log.Sync] waits until every
// event published before the call has been applied; [Log.View],
// [Log.Lookup] and [Log.List] read the state, and [Log.Changes] waits for
// it to move. The events' encoding, the messages' attributes and ordering
// key, and the names of the topic and subscriptions are the wire format:
// processes of every version that receive a subscription share one log.
package controllog

import (
	"context"
	"crypto/rand"
	"errors"
	"log/slog"
	"sync/atomic"
	"time"

	"cloud.google.com/go/pubsub/v2"

	"github.com/keyorder/keyorder/publisher"
	"github.com/keyorder/keyorder/subscriber/internal/ephemeral"
)

// Config is the configuration of a Log.
type Config struct {
	// Subscription is the full name of the subscription whose parking the
	// log keeps. The control topic (Topic) and the follower's
	// subscriptions are named after it.
	Subscription string
	// Retention is the control topic's message retention: how far back a
	// replay that finds no snapshot reads.
	Retention time.Duration
	// Lease is how long a releaser's claim holds without a heartbeat,
	// after which another may take the release over. It is a rule of the
	// log, so it must be the same on every process. Required.
	Lease time.Duration
	// Snapshots has the Log republish the state as a snapshot every hour
	// while it is open, as a running Receive does; a one-off read leaves
	// that to the Receives.
	Snapshots bool
	// Drain bounds how long Close, and an Open that fails, wait for the
	// server, plus a second: for the Log's events not yet sent and the
	// follower's subscription to be deleted.
	Drain time.Duration
}

// Topic returns the control topic of the subscription sub, named after
// it: its ID with "-parking-control".
func Topic(sub string) string { return ephemeral.Name(sub, "topics", "-parking-control") }

// snapshotEvery is how often a Log with Snapshots republishes the state;
// tests shorten it.
var snapshotEvery = time.Hour

// fastPublish sends events with little batching delay: a writer waits
// for its event's round trip. A request times out after PublishTimeout,
// not the client's 60 s: a releaser's claim lives for the release lease
// (30 s) without a sign of life, so its writer must hear of a publish that
// hangs, and try again, well within it; and a Log shut down while the
// service does not answer leaves its requests running no longer.
var fastPublish = func() pubsub.PublishSettings {
	s := pubsub.DefaultPublishSettings
	s.DelayThreshold = time.Millisecond
	s.Timeout = PublishTimeout
	return s
}()

// PublishTimeout bounds each request that publishes to the log, retries
// included.
const PublishTimeout = 10 * time.Second

// errStopped is returned to a writer whose Log stopped following the log.
var errStopped = errors.New("keyorder/subscriber: the parking control log is no longer followed")

// A Log is one process's part in the control log of a subscription: a
// follower that applies the log, and a publisher for this Log's events.
// Its methods are safe for concurrent use.
//
// Goroutines: the follower's Receive, started by Open and stopped by
// Close or by its own failure (Gone); with Snapshots, run, started by
// Open and waited for by Close.
type Log struct {
	cfg   Config
	topic string
	me    string // this Log's ID: By of its events
	f     *follower
	pub   *publisher.Publisher // events, all with controlKey
	seq   atomic.Uint64        // this Log's events

	// ctx bounds snapshots; cancelled by Close.
	ctx    context.Context
	cancel context.CancelFunc
	// loopDone is closed when run returns; nil without Snapshots.
	loopDone chan struct{}
}

// Open replays the control log of cfg.Subscription and follows it: it
// returns once it has caught up, its state whole. It reads the last few
// snapshot periods first, which hold a whole snapshot if any process ran
// lately, and all the topic retains only if they do not. It returns
// ctx.Err(), or the service's error, if it cannot catch up.
func Open(ctx context.Context, client *pubsub.Client, cfg Config) (*Log, error) {
	if cfg.Lease <= 0 {
		return nil, errors.New("keyorder/subscriber: the parking control log needs a release lease")
	}
	l := &Log{cfg: cfg, topic: Topic(cfg.Subscription), me: ephemeral.NewID()}
	var err error
	// It does not stamp (S12): the log orders itself.
	if l.pub, err = publisher.New(client, l.topic,
		publisher.WithDefaultOrderingKey(controlKey), publisher.WithPublishSettings(fastPublish), publisher.WithoutStamps()); err != nil {
		return nil, err
	}
	l.f = newFollower(client, l.topic, cfg.Subscription, l.me, cfg.Lease)
	if err := l.catchUp(ctx); err != nil {
		// Its cleanup is bounded as Close's, from now: ctx may have ended.
		cleanup, cancel := l.drainContext()
		defer cancel()
		_ = l.f.halt(cleanup)
		_ = l.pub.Close(cleanup)
		return nil, err
	}
	l.ctx, l.cancel = context.WithCancel(context.Background())
	if cfg.Snapshots {
		l.loopDone = make(chan struct{})
		go l.run()
	}
	return l, nil
}

// catchUp creates the follower's subscription and replays the control log
// into it: first the last few snapshot periods, which hold a whole
// snapshot if any process ran lately, then, if they do not, all the topic
// retains.
func (l *Log) catchUp(ctx context.Context) error {
	windows := []time.Duration{3 * snapshotEvery, l.cfg.Retention}
	if windows[0] >= windows[1] {
		windows = windows[1:]
	}
	for i, w := range windows {
		if i > 0 {
			if err := l.f.halt(ctx); err != nil && ctx.Err() != nil {
				return err
			}
			l.f.reset()
		}
		if err := l.f.follow(ctx, time.Now().Add(-w)); err != nil {
			return err
		}
		if err := l.Sync(ctx); err != nil {
			return err
		}
		if whole, _ := l.f.replayed(); whole {
			return nil
		}
	}
	l.f.settle()
	return nil
}

// Close is Shutdown within Config.Drain plus a second.
func (l *Log) Close() error {
	ctx, cancel := l.drainContext()
	defer cancel()
	return l.Shutdown(ctx)
}

// Shutdown stops following the log, deletes the follower's subscription,
// sends the events not yet sent, and returns the follower's error if it
// failed. A snapshot on its way is not waited for. It gives up on what is
// left when ctx ends, so that a server that hangs or is gone cannot hold a
// shutdown (S7): the official client's goroutine then ends on its own
// request timeouts, and the subscription expires after a day idle.
// Nothing may be recorded once it is called; calling it again does
// nothing.
func (l *Log) Shutdown(ctx context.Context) error {
	l.cancel()
	if l.loopDone != nil {
		<-l.loopDone
	}
	err := l.f.halt(ctx)
	_ = l.pub.Close(ctx)
	return err
}

// drainContext bounds a cleanup by Config.Drain plus a second.
func (l *Log) drainContext() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), l.cfg.Drain+time.Second)
}

// ID returns the Log's ID: the writer its events name, and so the owner
// a Claim makes.
func (l *Log) ID() string { return l.me }

// Record publishes ev and waits until the Log has applied it, and returns
// its verdict. It returns ctx.Err() if ctx ends first, the publish error
// if the event could not be stored, and an error if the Log stops
// following the log meanwhile; the event may then be in the log all the
// same.
func (l *Log) Record(ctx context.Context, ev Event) (Verdict, error) {
	return l.record(ctx, ev.entry())
}

// Publish stores ev in the log without waiting for its verdict, for an
// event whose outcome the writer need not know (Progress, Stop). It
// returns once the service has stored it, or with the publish error, or
// ctx.Err().
func (l *Log) Publish(ctx context.Context, ev Event) error {
	_, err := l.publish(ctx, ev.entry()).Get(ctx)
	return err
}

// Sync waits until the Log has applied every event published before the
// call: it publishes a marker addressed to this Log and waits until it
// comes back. The log has one order, so every event before the marker
// has been applied by then.
func (l *Log) Sync(ctx context.Context) error {
	_, err := l.record(ctx, &event{Kind: evMarker})
	return err
}

// View returns the parked keys and the recently released messages as of
// the last event applied.
func (l *Log) View() *View { return l.f.view.Load() }

// Lookup returns a copy of key's park, nil if it is not parked.
func (l *Log) Lookup(key string) *ParkRecord { return l.f.record(key) }

// List returns the parked keys, oldest first.
func (l *Log) List() []Summary { return l.f.list() }

// Changes returns a channel closed when the next event is applied.
func (l *Log) Changes() <-chan struct{} { return l.f.changes() }

// Gone returns a channel closed when the Log stops following the log: by
// Close, or because the follower's subscription failed, when Err says
// why. The state is no longer kept up to date then.
func (l *Log) Gone() <-chan struct{} { return l.f.gone() }

// Err returns why the Log stopped following the log once Gone is closed
// (after Close, that it is closed), and nil before.
func (l *Log) Err() error {
	select {
	case <-l.f.gone():
	default:
		return nil
	}
	if l.f.err != nil {
		return l.f.err
	}
	return errStopped
}

// publish sends ev to the control log as this Log's.
func (l *Log) publish(ctx context.Context, ev *event) *publisher.Result {
	ev.By = l.me
	data, err := encodeEvent(ev)
	if err != nil {
		panic(err) // events hold strings, times and numbers only
	}
	headers := map[string]string{attrState: "1"}
	if ev.Kind == evMarker {
		headers = map[string]string{attrTo: l.me}
	}
	return l.pub.Publish(ctx, &publisher.Message{Data: data, Headers: headers})
}

// record publishes ev and waits until the follower has applied it, and
// returns its verdict.
func (l *Log) record(ctx context.Context, ev *event) (Verdict, error) {
	ev.Seq = l.seq.Add(1)
	ch := l.f.await(ev.Seq)
	defer l.f.forget(ev.Seq)
	if _, err := l.publish(ctx, ev).Get(ctx); err != nil {
		return Verdict{}, err
	}
	select {
	case v := <-ch:
		return v, nil
	case <-ctx.Done():
		return Verdict{}, ctx.Err()
	case <-l.f.gone():
		return Verdict{}, l.Err() // why, if the follower failed
	}
}

// run publishes a snapshot whenever the newest is older than
// snapshotEvery, until Close or until the follower stops.
func (l *Log) run() {
	defer close(l.loopDone)
	// The first check comes soon: a Log that had to read the whole log,
	// for want of a snapshot, spares the next one that.
	check := time.NewTimer(snapshotCheck() / 64)
	defer check.Stop()
	gone := l.f.gone()
	for {
		select {
		case <-l.ctx.Done():
			return
		case <-gone:
			return // nothing can be recorded any more
		case <-check.C:
			if _, last := l.f.replayed(); time.Since(last) > snapshotEvery {
				if err := l.snapshot(l.ctx); err != nil && l.ctx.Err() == nil {
					slog.Warn("keyorder/subscriber: could not publish a parking snapshot; will try again", "topic", l.topic, "err", err)
				}
			}
			check.Reset(snapshotCheck())
		}
	}
}

// snapshotCheck is how long run waits before it checks whether a snapshot
// is due: a quarter of the period, with jitter, so that processes started
// together do not all publish one.
func snapshotCheck() time.Duration {
	var b [1]byte
	_, _ = rand.Read(b[:])
	q := snapshotEvery / 4
	return q + q*time.Duration(b[0])/256
}

// snapshot publishes the state as a snapshot: a begin, then the state as
// of the begin's place in the log, in parts.
func (l *Log) snapshot(ctx context.Context) error {
	nonce := ephemeral.NewID()
	captured := l.f.capture(nonce)
	defer l.f.dropCapture(nonce)
	if _, err := l.record(ctx, &event{Kind: evSnapshotBegin, Nonce: nonce}); err != nil {
		return err
	}
	parts := <-captured // sent before the verdict
	results := make([]*publisher.Result, len(parts))
	for i, part := range parts {
		results[i] = l.publish(ctx, &event{Kind: evSnapshot, Nonce: nonce, Part: part, Last: i == len(parts)-1})
	}
	for _, res := range results {
		if _, err := res.Get(ctx); err != nil {
			return err
		}
	}
	return nil
}

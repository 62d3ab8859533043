package subscriber

import (
	"context"
	"errors"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/keyorder/keyorder/ordering"
	"github.com/keyorder/keyorder/publisher"
	"github.com/keyorder/keyorder/subscriber/internal/controllog"
	"github.com/keyorder/keyorder/subscriber/internal/engine"
)

// The lanes' side of parking: the hooks a lane calls (accept, divert,
// park) and the flights that move a lane's deliveries to the parking
// topic. See park.go for the whole.

// A lane's part in parking. Every field is guarded by the lane's shard
// mutex; all are zero when parking is off and the key healthy.
type laneParking struct {
	// fence is the barrier marker the lane's deliveries wait for before
	// they run or are parked; 0 once passed. Set when a delivery arrives
	// at a lane holding nothing of its key.
	fence uint64
	// waiting is set while the lane is registered with the barrier.
	waiting bool
	// flight is set while the lane's deliveries are on their way to the
	// parking topic; the lane is active meanwhile, so no turn runs.
	flight bool
	// failed is the message of the key that failed for good here, until a
	// flight has parked the key.
	failed *parkCause
	// tries counts the flights that failed in a row, for their backoff.
	tries int
}

// busy reports whether the lane waits for the barrier or a flight, which
// will move it on.
func (pk *laneParking) busy() bool { return pk.waiting || pk.flight }

// parkCause is why a key parks: the message that failed for good.
type parkCause struct {
	id      string
	err     string
	attempt int
}

// accept is called for j, a new keyed delivery on l, before the lane's
// other rules: a delivery that arrives at a lane holding nothing of its
// key waits for the barrier. The shard's mutex must be held.
func (p *parking) accept(l *lane) {
	if pk := &l.pk; !pk.flight && l.running == nil && l.retry == nil && l.queue.Len() == 0 {
		// Nothing of the key here: another process may have had it, and
		// parked it, before the service sent j. A fence taken for an
		// earlier delivery that did not stay (one nacked for room) is
		// too early for j; none is needed while the view is fresh.
		pk.fence = p.b.Arrived(time.Now())
	}
}

// releasedLately reports whether the message id ran in the release of a
// park that has ended, within the last hour: the service may send it
// again after a lost ack, and it must not run twice (S6 across
// processes).
func (p *parking) releasedLately(id string) bool {
	return p.log.View().Released(id)
}

// divert is called by next for a lane with queued deliveries and nothing
// running: it holds them for the barrier, or sends them on a flight to
// the parking topic, and reports whether it did. The shard's mutex must be
// held.
func (p *parking) divert(l *lane) bool {
	pk := &l.pk
	if l.key == "" {
		return false
	}
	park := p.log.View().ParkID(l.key)
	if park == "" && pk.failed == nil {
		if pk.fence != 0 {
			if p.b.Wait(pk.fence, l.unfence) {
				pk.waiting, l.active = true, true
				return true
			}
			pk.fence = 0
		}
		return false
	}
	// A flight needs no barrier: the log's verdict on it comes after every
	// event published before it, so if it is refused, the view is up to
	// date when its deliveries go back to run.
	pk.fence = 0
	fl := &flight{p: p, l: l, park: park, cause: pk.failed}
	for j, ok := l.queue.Pop(); ok; j, ok = l.queue.Pop() {
		fl.jobs = append(fl.jobs, j)
	}
	pk.flight, l.active = true, true
	p.flights.Add(1)
	go fl.fly()
	return true
}

// park is the failure policy with parking: j, which failed for good with
// err, goes back to the head of its lane, and the lane's next flight parks
// the key. The shard's mutex must be held.
func (p *parking) park(l *lane, j *job, err error) {
	l.pk.failed = causeOf(j, err)
	l.putBack(j)
}

// causeOf is the park cause of j, which failed for good with err.
func causeOf(j *job, err error) *parkCause {
	return &parkCause{id: j.d.ID, err: err.Error(), attempt: j.d.Attempt}
}

// A flight moves a lane's deliveries to the parking topic: the copies are
// published, in order, then recorded in the control log, and only then
// acked on the subscription. Until it lands the lane runs nothing, so the
// key's later deliveries wait behind it. If the key is not parked yet, the
// flight parks it first.
type flight struct {
	p     *parking
	l     *lane
	jobs  []*job
	park  string     // the park in force when it left; "" to park the key
	cause *parkCause // why the key parks, if it does
}

// fly runs the flight on its own goroutine.
func (fl *flight) fly() {
	p := fl.p
	defer p.flights.Done()
	parked, parkedIt, err := p.move(p.ops, fl.l.key, fl.jobs, fl.park, fl.cause)
	fl.land(parked, err)
	if parkedIt {
		// Told once the flight has landed, so that a callback cannot hold
		// it up.
		p.told(KeyParked, fl.l.key, fl.cause, time.Now(), "")
	}
}

// move moves jobs, deliveries of key, to the parking topic: it parks the
// key first if park is "" (cause says why), publishes their copies, in
// order, records them under the park, and waits for the park to ripen. It
// reports whether they are parked, and so may be acked, and whether this
// call parked the key. It reports false with a nil error when the log
// refused them (the key was released meanwhile, or its new park ended at
// once): they are then to run, or move again, as the view now says.
func (p *parking) move(ctx context.Context, key string, jobs []*job, park string, cause *parkCause) (parked, parkedIt bool, err error) {
	if cause != nil && park == "" {
		v, err := p.log.Record(ctx, controllog.Event{Kind: controllog.Park, Key: key, Msg: cause.id, Err: cause.err})
		if err != nil {
			return false, false, err
		}
		if park = v.ParkID; park == "" {
			return false, false, nil
		}
		parkedIt = v.Applied
	}
	results := make([]*publisher.Result, len(jobs))
	for i, j := range jobs {
		results[i] = p.out.Publish(ctx, p.copyOf(j, park, cause), publisher.WithOrderingKey(key))
	}
	ids := make([]string, len(jobs))
	for i, res := range results {
		if _, err := res.Get(ctx); err != nil {
			return false, parkedIt, err
		}
		ids[i] = jobs[i].d.ID
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
func (p *parking) ripen(ctx context.Context, key string) error {
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

// copyOf is the parking topic's copy of j's message, parked under park;
// cause is why the key parked, if it did with this move.
func (p *parking) copyOf(j *job, park string, cause *parkCause) *publisher.Message {
	m := j.msg
	headers := make(map[string]string, len(m.Attributes)+6+ordering.StampAttributes)
	for k, v := range m.Attributes {
		if k != ordering.Header { // the key travels as the ordering key (P2)
			headers[k] = v
		}
	}
	// The original's stamp, which Delivery took out of the attributes:
	// the released message is the same message of the same producer, and
	// a store that applies it once (examples/inbox) must know it.
	if j.d.Seq != 0 {
		ordering.Stamp{Producer: j.d.Producer, Seq: j.d.Seq}.Put(headers)
		if j.stamp.sig != "" { // for the release to verify it again (stampkey.go)
			headers[ordering.SignatureAttribute] = j.stamp.sig
		}
	}
	headers[AttrParkID] = park
	headers[AttrMessageID] = j.d.ID
	// The rest as room allows: the service takes 100 attributes.
	extra := [][2]string{
		{AttrSubscription, p.r.s.name},
		{AttrPublishTime, m.PublishTime.UTC().Format(time.RFC3339Nano)},
		{AttrAttempts, "0"},
	}
	if c := cause; c != nil && c.id == j.d.ID {
		extra[2][1] = strconv.Itoa(c.attempt)
		extra = append(extra, [2]string{AttrError, truncateUTF8(c.err, publisher.MaxAttributeValueBytes)})
	}
	for _, kv := range extra {
		if len(headers) < publisher.MaxAttributes {
			headers[kv[0]] = kv[1]
		}
	}
	return &publisher.Message{Data: m.Data, Headers: headers}
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

// land ends the flight. Parked, its deliveries are acked. Otherwise they go
// back to the head of the lane, in order: refused by the log (the key was
// released meanwhile), they run or fly again as the view now says; after
// an error, the lane waits a backoff and flies again, holding the key
// here, so that nothing is lost or overtaken. At shutdown they are nacked.
func (fl *flight) land(parked bool, err error) {
	l, r := fl.l, fl.p.r
	l.update(func(now time.Time) (fx effects) {
		pk := &l.pk
		pk.flight = false
		switch {
		case parked:
			pk.failed, pk.tries = nil, 0
			r.parked(&fx, fl.jobs...)
		case r.stopped():
			for _, j := range fl.jobs {
				fx.add(j, engine.Shutdown)
			}
		default:
			for i := len(fl.jobs) - 1; i >= 0; i-- {
				l.putBack(fl.jobs[i])
			}
			if err != nil {
				pk.tries++
				l.wait(r.backoff(pk.tries), now)
			}
		}
		return fx
	})
	if err != nil && !errors.Is(err, context.Canceled) {
		r.obs.log.Warn("keyorder/subscriber: could not park messages; will try again", "key", l.key, "error", err)
	}
}

// parked settles jobs, moved to the parking topic, as parked: acked, and
// counted in Stats.Parked. Every door that parks calls it.
func (r *receiver) parked(fx *effects, jobs ...*job) {
	for _, j := range jobs {
		fx.add(j, engine.Parked)
	}
	r.s.counts.parked.Add(int64(len(jobs)))
}

// told tells the WithKeyEvents callback, and the log, that key was parked
// or unparked, cause being the message that parked it.
func (p *parking) told(kind KeyEventKind, key string, cause *parkCause, since time.Time, reason string) {
	if p.r == nil {
		return
	}
	k := HeldKey{Key: key, MessageID: cause.id, Since: since, Attempt: cause.attempt}
	if cause.err != "" {
		k.Err = errors.New(cause.err)
	}
	p.r.emit(KeyEvent{Kind: kind, HeldKey: k, Reason: reason, At: time.Now()})
}

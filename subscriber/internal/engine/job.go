package engine

import (
	"context"
	"sync/atomic"
	"time"

	"cloud.google.com/go/pubsub/v2"

	"github.com/keyorder/keyorder/internal/window"
	"github.com/keyorder/keyorder/ordering"
)

// A Job is one message on its way through Receive: queued on its key's
// lane, running, waiting for its next attempt, and at last acked or
// nacked, exactly once (S11).
//
// The service may send a message again while a delivery of it is still
// here: after a lost ack or an expired lease, as part of a redelivered
// tail, or as a duplicate. The new delivery joins the job rather than
// queueing behind it (see lane.join), so a message is processed once and
// every delivery of it is settled with it.
type Job struct {
	// msg is the newest delivery of the message, and stale the older ones,
	// settled together with it. Both are guarded by the lane's shard
	// mutex, and read by settle once the job has left its lane.
	Msg   *pubsub.Message
	stale []*pubsub.Message

	// ctx is the official client's context for the first delivery: it
	// carries the message's trace span to the handler. life, when set,
	// bounds the handler's context in place of the receiver's (a push
	// request's); set before the job is shared.
	Ctx  context.Context
	life context.Context

	// d is what the handler sees. It is written only while no handler
	// call of the job runs, under the lane's shard mutex.
	D Delivery

	// redelivered is set, under the lane's shard mutex, when a newer
	// delivery joins the job while its handler runs: if the call fails,
	// the newer delivery gets a call of its own rather than being nacked
	// unrun (judge reads it). Cleared, under the mutex, with stale.
	redelivered atomic.Bool

	// retriesByNack is set by a door whose retries are the service's
	// redeliveries (push): a retry on the last delivery before
	// dead-lettering would lose the key's order. Set before the call.
	retriesByNack bool

	// notBefore is when the message may be called again: after the
	// backoff of a message that failed for good on an earlier delivery,
	// set when the job is accepted, or of a call that failed, set by
	// retryLater, so that a delivery placed ahead of it (place) leaves
	// it its wait. Guarded by the lane's shard mutex.
	notBefore time.Time

	// received is when the first delivery arrived: the age of what this
	// process holds (Stats, the oldest_unacked.age gauge). Set once.
	received time.Time
	// err is the error of the call that made the message fail for good,
	// for its log; set under the shard mutex before it is settled.
	err error

	// fresh is set when the delivery arrived at a lane holding nothing of
	// its key: the key may have been on another client until then. Set
	// before the job is shared.
	fresh bool

	// stamp is what became of the message's stamp as it arrived: the
	// signature that goes with it to a parked copy, or why it was not
	// taken (takeStamp). Set once.
	Stamp stampNote

	// redriven is set when the message came back from a dead-letter
	// topic, republished with the attributes the service adds there
	// (S12). Set once.
	Redriven bool

	size    int64       // bytes of data, for room (S10)
	counted bool        // counted in the receiver's room; set once, before the job is shared
	settled atomic.Bool // set by the one ack or nack (S11)
}

// newJob makes the job of m, whose stamp counts only if it verifies
// against keys, when set (takeStamp).
func newJob(ctx context.Context, m *pubsub.Message, keys *ordering.StampKeys) *Job {
	j := &Job{Msg: m, Ctx: ctx, Redriven: IsRedriven(m.Attributes), size: int64(len(m.Data)), received: time.Now()}
	j.D, j.Stamp = deliveryOf(m, keys)
	return j
}

// deliveryAttempt is the service's count for the newest delivery, 0 when
// the subscription has no dead-letter policy.
func (j *Job) deliveryAttempt() int {
	if j.Msg == nil {
		return 0 // a released copy: its delivery was acked when parked
	}
	if a := j.Msg.DeliveryAttempt; a != nil {
		return *a
	}
	return 0
}

// ctxOr returns the job's context for its logs, Background if it has none.
func (j *Job) ctxOr() context.Context {
	if j.Ctx != nil {
		return j.Ctx
	}
	return context.Background()
}

// lifeOr returns the context that bounds the handler's: the job's own, or
// else def.
func (j *Job) lifeOr(def context.Context) context.Context {
	if j.life != nil {
		return j.life
	}
	return def
}

// dropStale nacks the deliveries of j's message older than its newest,
// which is to be called again. The lane's shard mutex must be held.
func (j *Job) dropStale() {
	for _, m := range j.stale {
		m.Nack()
	}
	j.stale = nil
	j.redelivered.Store(false)
}

// join makes m, a newer delivery of j's message, the one j settles first.
// The lane's shard mutex must be held.
func (j *Job) join(m *pubsub.Message, running bool) {
	j.stale = append(j.stale, j.Msg)
	j.Msg = m
	if running {
		j.redelivered.Store(true)
	}
}

// handlerContext is the context a handler runs with: the values of the
// official client's per-message context, where its trace span lives, and
// the life of Receive's handler context, which outlasts Receive's own
// context by the drain timeout (S7).
type handlerContext struct {
	context.Context                 // values
	life            context.Context // deadline, cancellation and error
}

func (c handlerContext) Deadline() (time.Time, bool) { return c.life.Deadline() }
func (c handlerContext) Done() <-chan struct{}       { return c.life.Done() }
func (c handlerContext) Err() error                  { return c.life.Err() }

// newDelivery builds the Delivery of m, taking its stamp on trust.
func newDelivery(m *pubsub.Message) Delivery {
	d, _ := deliveryOf(m, nil)
	return d
}

// deliveryOf builds the Delivery of m. It takes over m's attribute map,
// which no one else reads, to add the key header without a copy. With
// keys, a stamp counts only if its signature verifies (takeStamp).
func deliveryOf(m *pubsub.Message, keys *ordering.StampKeys) (Delivery, stampNote) {
	headers := m.Attributes
	if m.OrderingKey != "" {
		if headers == nil {
			headers = make(map[string]string, 1)
		}
		headers[ordering.Header] = m.OrderingKey
	}
	d := Delivery{
		ID:          m.ID,
		Key:         m.OrderingKey,
		Data:        m.Data,
		Headers:     headers,
		PublishTime: m.PublishTime,
	}
	if m.DeliveryAttempt != nil {
		d.DeliveryAttempt = *m.DeliveryAttempt
	}
	note := takeStamp(&d, headers, keys, m.OrderingKey, m.Data)
	return d, note
}

// IsRedriven reports whether a message with attrs came back from a
// dead-letter topic. An unwrapped push carries its attributes as HTTP
// headers, whose names arrive lower-cased.
func IsRedriven(attrs map[string]string) bool {
	_, ok := attrs[DeadLetterSourceAttribute]
	if !ok {
		_, ok = attrs[redrivenHeader]
	}
	return ok
}

// Signed stamps. A stamp (S12) is an attribute: whoever may publish to the
// topic, or push to the endpoint, can write one, with a real producer's ID
// and any number. Taken on trust, a forged stamp ahead of a producer's
// real numbers makes them copies, acked unrun. With [WithStampKey], a
// stamp counts only with the signature its producer made
// ([ordering.StampKeys]) over the key, the stamp and the data; a message
// whose signature is missing or wrong is not a stamped message at all:
//
//   - it is delivered as unstamped, Producer "" and Seq 0, its stamp and
//     signature attributes taken out of Headers as a valid stamp's are,
//     so that a handler that republishes its headers does not carry it;
//   - so it never enters the sequence window (S12): it is never taken for
//     a copy, never makes another message one, and reports no gap; and
//     the inbox (subscriber/inbox) refuses it as unstamped;
//   - it is counted in [Stats.Unverified] and the metric
//     keyorder.subscriber.unverified_stamps, and logged at Warn once per
//     producer and key (again at most hourly while it goes on).
//
// Every door checks: Receive (and Replay, which runs it) and a push
// request as a message arrives, a release of parked messages as it reads
// each copy. A verified stamp's signature stays with its delivery, so
// that a parked copy carries it and its release verifies it again.

// A stampNote is what became of a message's stamp as it arrived.
type stampNote struct {
	// sig is the signature of the stamp the delivery carries, if it came
	// with one, so that a parked copy carries it too (ParkingDoor.Copy).
	Sig string
	// refused is a well-formed stamp whose signature failed, and why; the
	// delivery carries no stamp.
	refused ordering.Stamp
	err     error
}

// takeStamp moves the stamp of headers, the attributes of a message of
// orderingKey and data, into d, unless keys are set and its signature
// does not verify; either way it leaves headers without the stamp and its
// signature. A malformed stamp stays in headers, and d unstamped.
func takeStamp(d *Delivery, headers map[string]string, keys *ordering.StampKeys, orderingKey string, data []byte) stampNote {
	st, err := ordering.ParseStamp(headers)
	if err != nil || st.IsZero() {
		return stampNote{}
	}
	var note stampNote
	if keys != nil {
		if err := keys.Verify(headers, orderingKey, st, data); err != nil {
			note.refused, note.err = st, err
		}
	}
	if note.err == nil {
		d.Producer, d.Seq = st.Producer, st.Seq
		note.Sig = headers[ordering.SignatureAttribute]
	}
	ordering.DeleteStamp(headers)
	return note
}

// An Outcome is what became of one delivery: what the call path decided
// of a call, and how a door settled the delivery. It is the one name of
// each outcome in the call path, the doors, Stats and the metrics: its
// String is its keyorder.outcome label, Reason its keyorder.reason label.
//
// Adding an outcome is a constant and its labels here, the call path's
// decision of it, and what each door's settle does with it.
type Outcome uint8

const (
	Queued Outcome = iota // not settled: queued on its lane
	Joined                // not settled: joined a job of the same message

	// What the call path decides of a call; a door settles it.

	Acked        // the handler returned nil: ack (S4)
	Deduplicated // not called, processed already (S6, S12): ack
	Shutdown     // not called, or failed, while Receive stops (S7): nack
	Retried      // failed: call again after a delay (S5); push nacks, for the service to push again
	HoldKey      // failed for good: nack, and hold the key until the message comes back (S5)
	Parked       // failed for good: park the key (WithParking); its deliveries move to the parking topic, acked
	Failed       // failed for good, nothing to hold (S8) or dead-lettered: nack

	// How a door settles a delivery it does not call.

	Held         // nacked unrun: its key is held (S5)
	Tail         // nacked unrun with its key's failed message (S5)
	Room         // nacked unrun: its key had no room (S10)
	Skipped      // acked unrun: outside the range a Replay reads
	DeadLettered // Failed on its last delivery: the service forwards it to the dead-letter topic

	NumOutcomes // the number of outcomes, for tables indexed by Outcome
)

// labels are each outcome's metric labels, and whether its delivery is
// acked.
var labels = [NumOutcomes]struct {
	label, reason string
	acks          bool
}{
	Queued:       {label: "queued"},
	Joined:       {label: "joined"},
	Acked:        {label: "acked", acks: true},
	Deduplicated: {label: "deduplicated", acks: true},
	Shutdown:     {label: "nacked", reason: "shutdown"},
	Retried:      {label: "nacked", reason: "retry"},
	HoldKey:      {label: "nacked", reason: "failed"},
	Parked:       {label: "parked", acks: true},
	Failed:       {label: "nacked", reason: "failed"},
	Held:         {label: "held", reason: "hold"},
	Tail:         {label: "held", reason: "tail"},
	Room:         {label: "nacked", reason: "room"},
	Skipped:      {label: "acked", reason: "replay_range", acks: true},
	DeadLettered: {label: "dead_lettered", reason: "failed"},
}

// String is o's keyorder.outcome label.
func (o Outcome) String() string { return labels[o].label }

// Reason is o's keyorder.reason label, empty where it has none.
func (o Outcome) Reason() string { return labels[o].reason }

// Acks reports whether a delivery settled with o is acked.
func (o Outcome) Acks() bool { return labels[o].acks }

// ForGood reports whether the message failed for good.
func (o Outcome) ForGood() bool {
	return o == HoldKey || o == Parked || o == Failed || o == DeadLettered
}

// Effects collects what a change to a lane decided and must be done once
// its shard's mutex is released: acks and nacks, which call into the
// official client, the lane's next turn, and events for user callbacks,
// which may block, panic or exit the goroutine.
type Effects struct {
	settle []settlement
	turn   bool
	events []KeyEvent
}

// settlement is the fate of one job: acked, or nacked for a reason.
type settlement struct {
	j   *Job
	out Outcome
}

func (fx *Effects) Add(j *Job, out Outcome) {
	fx.settle = append(fx.settle, settlement{j, out})
}

// processed remembers the IDs of the last n messages processed (S6).
type processed struct{ w *window.Window[struct{}] }

func newProcessed(n int) processed { return processed{window.New[struct{}](n)} }

func (p processed) add(id string) {
	p.w.Update(id, func(struct{}) struct{} { return struct{}{} })
}

func (p processed) contains(id string) bool {
	_, ok := p.w.Get(id)
	return ok
}

// attempts counts, per message, the handler calls and the failures that
// count against [WithMaxAttempts], across every delivery of the message
// this Receive has seen: without a dead-letter policy the service reports
// no delivery attempt, so this is how a handler learns that it is on its
// 500th try. Only messages that have failed are remembered, until they
// succeed or, once attemptWindow messages are failing, until they are the
// oldest; a healthy message costs one lookup.
type attempts struct{ w *window.Window[attempt] }

// attemptWindow is how many failing messages attempts remembers.
const attemptWindow = 10_000

type attempt struct {
	calls    int  // handler calls so far
	failures int  // failed calls that count against the limit
	gaveUp   bool // it failed for good: counted in Stats.Failed
}

func newAttempts() attempts { return attempts{window.New[attempt](attemptWindow)} }

// prior returns what is remembered of message id: zero if it never failed.
func (a attempts) prior(id string) attempt {
	v, _ := a.w.Get(id)
	return v
}

// fail records that call number calls of message id failed, counted or not
// against the limit, and returns the failures so far that count.
func (a attempts) fail(id string, calls int, counted bool) int {
	return a.w.Update(id, func(v attempt) attempt {
		v.calls = max(v.calls, calls)
		if counted {
			v.failures++
		}
		return v
	}).failures
}

// giveUp records that message id failed for good, and reports whether it
// had not already, so that Stats.Failed counts it once however many
// deliveries bring it back.
func (a attempts) giveUp(id string) (first bool) {
	a.w.Update(id, func(v attempt) attempt {
		first, v.gaveUp = !v.gaveUp, true
		return v
	})
	return first
}

// succeed forgets message id.
func (a attempts) succeed(id string) { a.w.Delete(id) }

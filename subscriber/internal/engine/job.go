package engine

import (
	"context"
	"sync/atomic"
	"time"

	"cloud.google.com/go/pubsub/v2"

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
	// taken (stampkey.go). Set once.
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
// against keys, when set (stampkey.go).
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
// keys, a stamp counts only if its signature verifies (stampkey.go).
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

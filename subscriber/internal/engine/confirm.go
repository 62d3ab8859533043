package engine

import (
	"context"
	"sync"
	"time"

	"cloud.google.com/go/pubsub/v2"

	"github.com/keyorder/keyorder/internal/fifo"
	"github.com/keyorder/keyorder/ordering"
)

// On a subscription with exactly-once delivery, the service confirms each
// ack: a confirmed ack is final, and the message is not delivered again.
// An ack can also fail, for example when its lease ran out first; the
// message is then delivered again. Receive acks such subscriptions with
// AckWithResult and treats a failed ack as the message not processed: it
// forgets the message in its S6 window, so that when the service delivers
// it again the handler runs again. A handler on such a subscription must
// therefore still be idempotent, or check the effect it made.
//
// Since the result of an ack comes after the next message of the key may
// have started, a message whose ack failed can run again after its
// successors did. Waiting for each confirmation before the next message of
// the key would keep order there, at the cost of a round trip per message.

// confirmer waits for the service's answers to the acks of one Receive on
// an exactly-once subscription, in the order the acks were sent, and
// forgets each message whose ack failed. Its one goroutine is started by
// start and owned by the receiver, which waits for it in stop.
type confirmer struct {
	r *Engine

	mu      sync.Mutex
	pending fifo.Queue[pendingAck] // guarded by mu
	waiting int                    // acks sent and not answered yet, pending included; guarded by mu
	wake    chan struct{}          // capacity 1: pending has an ack
	answer  chan struct{}          // capacity 1: an answer came
	quit    chan struct{}          // closed by stop: drain what is pending, then exit
	done    chan struct{}          // closed when the goroutine exits

	// ctx bounds the wait for an answer; stop cancels it if the answers
	// have not all come within the drain timeout.
	ctx    context.Context
	cancel context.CancelFunc
}

type pendingAck struct {
	ran   bool // the handler ran for it (S4): a failed ack undoes that
	id    string
	key   string
	stamp ordering.Stamp // zero if the delivery's stamp is not checked
	res   *pubsub.AckResult
}

func (c *confirmer) start(r *Engine) {
	c.r = r
	c.wake = make(chan struct{}, 1)
	c.answer = make(chan struct{}, 1)
	c.quit = make(chan struct{})
	c.done = make(chan struct{})
	c.ctx, c.cancel = context.WithCancel(context.Background())
	go c.run()
}

// ack acks m, the newest delivery of p's message, and has its answer
// watched.
func (c *confirmer) ack(p pendingAck, m *pubsub.Message) {
	p.res = m.AckWithResult()
	c.mu.Lock()
	c.pending.Push(p)
	c.waiting++
	c.mu.Unlock()
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

// flush waits until every ack sent so far has its answer, for at most
// wait.
func (c *confirmer) flush(wait time.Duration) {
	t := time.NewTimer(wait)
	defer t.Stop()
	for {
		c.mu.Lock()
		n := c.waiting
		c.mu.Unlock()
		if n == 0 {
			return
		}
		select {
		case <-c.answer:
		case <-t.C:
			return
		}
	}
}

func (c *confirmer) run() {
	defer close(c.done)
	for {
		c.mu.Lock()
		p, ok := c.pending.Pop()
		c.mu.Unlock()
		if !ok {
			select {
			case <-c.wake:
				continue
			case <-c.quit:
				c.mu.Lock()
				empty := c.pending.Len() == 0
				c.mu.Unlock()
				if empty {
					return
				}
				continue
			}
		}
		// The official client answers every ack once it has sent it,
		// which its Receive does before returning.
		status, err := p.res.Get(c.ctx)
		if err != nil || status != pubsub.AcknowledgeStatusSuccess {
			if p.ran {
				// Not processed after all: run it again when it comes
				// back. A copy skipped, or a message parked, owes
				// nothing: its handler did not run here.
				c.r.seen.w.Delete(p.id)
				if p.stamp.Seq != 0 {
					c.r.seqs.Undo(p.key, p.stamp, p.id)
				}
			}
			c.r.sub.Counts.AckFailed.Add(1)
		}
		c.mu.Lock()
		c.waiting--
		c.mu.Unlock()
		select {
		case c.answer <- struct{}{}:
		default:
		}
	}
}

// stop waits for the answers to every ack sent, once the official Receive
// has returned, for at most wait; answers that have not come by then are
// not waited for.
func (c *confirmer) stop(wait time.Duration) {
	defer c.cancel()
	close(c.quit)
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-c.done:
	case <-t.C:
		c.cancel()
		<-c.done
	}
}

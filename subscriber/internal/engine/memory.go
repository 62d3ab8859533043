package engine

import "github.com/keyorder/keyorder/internal/window"

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

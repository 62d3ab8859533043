package publisher

import "time"

// GateState reports, for tests, how many keys have a gate across p's
// shards and the largest map peak a shard is keeping.
func GateState(p *Publisher) (keys, maxPeak int) {
	for i := range p.shards {
		sh := &p.shards[i]
		sh.mu.Lock()
		keys += len(sh.keys)
		maxPeak = max(maxPeak, sh.peak)
		sh.mu.Unlock()
	}
	return keys, maxPeak
}

// ShrinkAt is shrinkAt, for tests.
const ShrinkAt = shrinkAt

// OnFlowWait makes p call f whenever a Publish starts to wait for
// flow-control room. Call it before the first Publish.
func OnFlowWait(p *Publisher, f func()) { p.flow.waiting = f }

// HoldsMessage reports whether r still keeps its message.
func HoldsMessage(r *Result) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.msg.Data != nil || r.msg.Attributes != nil
}

// SetCounterWindow makes each of p's shards keep at most window counters
// of idle keys per generation. Call it before the first Publish.
func SetCounterWindow(p *Publisher, window int) { p.counterWindow = window }

// KeptCounters returns the number of idle keys' counters p keeps.
func KeptCounters(p *Publisher) int {
	n := 0
	for i := range p.shards {
		sh := &p.shards[i]
		sh.mu.Lock()
		n += sh.counters.len()
		sh.mu.Unlock()
	}
	return n
}

// SetRateCheck makes p find a key hot once it publishes more than limit
// bytes within one window, reading the time from clock (also used for
// publish durations). Call it before the first Publish.
func SetRateCheck(p *Publisher, window time.Duration, limit int64, clock func() time.Duration) {
	p.rec.window, p.rec.limit, p.rec.clock = window, limit, clock
}

// OfficialReady returns a channel closed once the service has answered
// for r, a Result of a key's message in flight: the publisher settles r
// as the answer arrives, so it is r's Ready channel.
func OfficialReady(r *Result) <-chan struct{} { return r.Ready() }

// DefaultInFlight is the bound on requests in flight without
// NumGoroutines, for benchmarks.
func DefaultInFlight() int { return defaultInFlight() }

// SetLingerMax caps p's lingers at d. Call it before the first Publish.
func SetLingerMax(p *Publisher, d time.Duration) { p.lingerFor = d }

// HoldLingers makes p's lingers last d whatever p is given meanwhile: its
// timer looks at them every d. Call it before the first Publish.
func HoldLingers(p *Publisher, d time.Duration) { p.lingerFor, p.lingerTick = d, d }

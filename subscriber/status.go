package subscriber

import (
	"time"

	"github.com/keyorder/keyorder/subscriber/internal/engine"
)

// A HeldKey is a key whose next message cannot run yet because a message
// of the key failed: it waits for the message's next attempt, or is held
// until the service brings the message back (S5).
type HeldKey = engine.HeldKey

// KeyEventKind tells what happened to a key.
type KeyEventKind = engine.KeyEventKind

const (
	// KeyHeld: the failure policy applied to a message of the key, which
	// was nacked with its local tail; the key's later messages wait for it
	// (S5). A key that fails again while held is not reported again.
	KeyHeld = engine.KeyHeld
	// KeyReleased: the hold ended, because the failed message succeeded,
	// the service gave up on it (dead-lettering), or the hold lapsed after
	// [WithRedeliveryWait]. [KeyEvent.Reason] says which.
	KeyReleased = engine.KeyReleased
	// KeyParked: a message of the key failed for good and the key was
	// parked ([WithParking]): it and the key's later messages go to the
	// parking topic until [Subscription.Release]. Told by the process
	// that parked it.
	KeyParked = engine.KeyParked
	// KeyUnparked: [Subscription.Release] ran the key's parked messages
	// and unparked it. Told by the process that released it, with the
	// message that parked the key; Attempt is 0, as the control log does
	// not keep that message's calls.
	KeyUnparked = engine.KeyUnparked
)

// Reasons a hold ends, in [KeyEvent.Reason].
const (
	ReasonSucceeded    = engine.ReasonSucceeded
	ReasonDeadLettered = engine.ReasonDeadLettered
	ReasonLapsed       = engine.ReasonLapsed
	ReasonReleased     = engine.ReasonReleased // KeyUnparked: by Subscription.Release
)

// A KeyEvent is what a [WithKeyEvents] callback is told: its Kind, the
// HeldKey (what was known of the key's failure when the event happened),
// the Reason a KeyReleased hold ended (ReasonReleased for KeyUnparked;
// empty for KeyHeld and KeyParked), and when it happened, At.
type KeyEvent = engine.KeyEvent

// Stats counts what the subscription's Receive calls have done with their
// deliveries, and what the running one holds now. [Subscription.Stats]
// returns it.
type Stats struct {
	// Received counts deliveries handed over by the official client.
	Received int64
	// Acked counts messages acked after the handler returned nil (S4).
	Acked int64
	// Deduplicated counts deliveries acked without calling the handler:
	// the message was processed already (S6).
	Deduplicated int64
	// Retried counts failed handler calls whose message is to be called
	// again, the key waiting meanwhile (S5): after a backoff, on Receive
	// and in a release, or when the service pushes it again, on push.
	Retried int64
	// Failed counts messages whose handler failed for good (their
	// attempts ran out, or it returned Permanent), once each however many
	// deliveries brought them back, whatever the failure policy then did:
	// nacked them with their key held, or parked them.
	Failed int64
	// DeadLettered counts the Failed messages on their last delivery: the
	// service forwards them to the dead-letter topic.
	DeadLettered int64
	// NackedHeld counts deliveries nacked unrun because their key was held
	// (S5).
	NackedHeld int64
	// NackedTail counts deliveries nacked unrun with their key's failed
	// message (S5).
	NackedTail int64
	// NackedRoom counts deliveries nacked unrun because their key had used
	// its room (S10).
	NackedRoom int64
	// NackedShutdown counts deliveries nacked unrun, or after a handler
	// call cut short, because Receive was shutting down (S7).
	NackedShutdown int64
	// AckFailed counts acks reported failed on a subscription with
	// exactly-once delivery: those messages may be delivered again, and
	// their handler then runs again. The official client reports every
	// ack of a request that carried a refused one as failed, though the
	// service applied the others, so this may count more than were lost.
	AckFailed int64
	// Duplicates counts the Deduplicated deliveries found by their stamp
	// rather than their message ID: copies of a processed message under
	// another ID, as a retried publish stores them (see [Gap] and
	// [WithSequenceWindow]).
	Duplicates int64
	// Gaps counts the gaps in producers' sequences reported to
	// [WithGapHandler] that are certain, and UncertainGaps those that are
	// not: seen after the key had been away, perhaps on another client
	// ([Gap.Uncertain]), and the numbers before the first one a Receive
	// saw of a sequence, when that is above 1 of its epoch. They are this
	// process's view; with several clients, a store they share (package
	// inbox) is the authority on what is missing.
	Gaps, UncertainGaps int64
	// Rerun counts stamped messages run though they may have run before:
	// a bound of [WithSequenceWindow] was reached, and what the window
	// forgot runs again rather than being taken for a copy (S12).
	Rerun int64
	// Unverified counts deliveries whose stamp's signature was missing or
	// wrong, with [WithStampKey]: they ran as unstamped messages, never
	// taken for copies.
	Unverified int64
	// Parked counts messages moved to the parking topic and acked
	// ([WithParking]), and Released the parked messages run by
	// [Subscription.Release].
	Parked, Released int64

	// Queued is the number of deliveries received and not started, now.
	Queued int
	// Running is the number of handler calls running now.
	Running int
	// Held lists the keys waiting on a failed message, now, oldest first.
	Held []HeldKey
	// ParkedKeys lists the parked keys ([WithParking]) as the running
	// Receive's view of the control log has them now, without the round
	// trip [Subscription.Parked] makes to be sure it is up to date.
	ParkedKeys []ParkedKey

	// At is when the snapshot was taken, and Receiving whether a Receive
	// was running then; what it holds is zero when none was.
	At        time.Time
	Receiving bool
	// Workers is how many handler calls may run at once ([WithWorkers]).
	Workers int
	// Keys counts the keys with something in the running Receive: a
	// delivery queued or running, a retry pending, a hold or a room gap.
	Keys int
	// OldestAge is how long the oldest delivery the running Receive holds,
	// queued, running or waiting for a retry, has been here; 0 when it
	// holds none. The service's oldest-unacked-age metric covers the
	// whole subscription; this is the part in this process.
	OldestAge time.Duration
	// ActivePartitions counts the partitions with a delivery queued or
	// running, and Partitions lists the busiest of them, most deliveries
	// first: at most [StatsTop].
	ActivePartitions int
	Partitions       []engine.PartitionStats
	// TopBacklog lists the keys with the most deliveries here, queued or
	// running, and TopAge those whose oldest delivery has been here
	// longest: at most [StatsTop] each, in that order.
	TopBacklog []engine.KeyStats
	TopAge     []engine.KeyStats
}

// Stats returns what the subscription's Receive calls have done so far,
// and what the running one holds now: its backlog by partition and by key
// (hot keys), and its held keys. It is safe to call at any time; the
// counts are cumulative over every Receive on the Subscription.
//
// It takes each of the 64 lane shards' mutexes in turn, and costs about
// a microsecond per key with deliveries here, mostly waiting on memory:
// about 80 ms with 100,000 such keys (BenchmarkStats), each shard's mutex
// held about a sixty-fourth of that. Calling it every second is cheap.
func (s *Subscription) Stats() Stats {
	c := &s.counts
	st := Stats{
		Received:       c.Received.Load(),
		Acked:          c.Settled[engine.Acked].Load(),
		Deduplicated:   c.Settled[engine.Deduplicated].Load(),
		Retried:        c.Retried.Load(),
		Failed:         c.Failed.Load(),
		DeadLettered:   c.DeadLettered.Load(),
		NackedHeld:     c.Settled[engine.Held].Load(),
		NackedTail:     c.Settled[engine.Tail].Load(),
		NackedRoom:     c.Settled[engine.Room].Load(),
		NackedShutdown: c.Settled[engine.Shutdown].Load(),
		AckFailed:      c.AckFailed.Load(),
		Duplicates:     c.Duplicates.Load(),
		Gaps:           c.Gaps.Load(),
		UncertainGaps:  c.UncertainGaps.Load(),
		Rerun:          c.Rerun.Load(),
		Unverified:     c.Unverified.Load(),
		Parked:         c.Parked.Load(),
		Released:       c.Released.Load(),
	}
	st.At, st.Workers = time.Now(), s.cfg.Workers
	if r := s.current.Load(); r != nil {
		var sn engine.Snapshot
		r.Survey(&sn, st.At, true)
		st.Receiving = true
		st.Queued, st.Running, st.Held, st.Keys, st.OldestAge = sn.Queued, sn.Running, sn.Held, sn.Keys, sn.OldestAge
		st.ActivePartitions, st.Partitions = sn.ActivePartitions, sn.Partitions
		st.TopBacklog, st.TopAge = sn.TopBacklog, sn.TopAge
		if p := s.parkNow.Load(); p != nil {
			st.ParkedKeys = p.Keys()
		}
	}
	return st
}

// HeldKeys lists the keys of the running Receive that wait on a failed
// message, oldest failure first: those waiting for a retry, and those held
// until the service brings their message back (S5). It returns nil when
// no Receive runs.
func (s *Subscription) HeldKeys() []HeldKey {
	if r := s.current.Load(); r != nil {
		_, _, held := r.Lanes.Snapshot()
		return held
	}
	return nil
}

// StatsTop is how many partitions, and how many keys in each ranking,
// [Subscription.Stats] lists.
const StatsTop = engine.StatsTop

// A PartitionStats is one partition with work in the running Receive.
//
// A partition is what keys hash to with [ordering.Partition] (S3): its
// deliveries run one at a time. With the default 65,536 partitions, few
// keys share one and a partition is close to a key, so the busy ones point
// at hot keys; with a few partitions ([WithPartitions]), each is a group of
// keys that waits on its slowest. Partitions are not workers: a worker runs
// whichever partition is ready next, so a worker has no backlog of its own.
type PartitionStats = engine.PartitionStats

// A KeyStats is one key with work in the running Receive.
type KeyStats = engine.KeyStats

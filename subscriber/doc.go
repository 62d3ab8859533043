// Package subscriber receives messages from Google Cloud Pub/Sub in order
// per key, processing many keys in parallel, on top of the official
// cloud.google.com/go/pubsub/v2 client.
//
//	sub, err := subscriber.CreateWithTopic(ctx, client, "orders", "orders-billing",
//		subscriber.WithWorkers(16))
//	if err != nil {
//		return err
//	}
//	err = sub.Receive(ctx, func(ctx context.Context, d *subscriber.Delivery) error {
//		// d.Headers["partition-key"] is the ordering key.
//		return bill(ctx, d.Key, d.Data) // nil acks; an error retries, then nacks
//	})
//
// # Order
//
// [CreateWithTopic] creates missing topics and subscriptions, the latter
// with message ordering on (rule S1). A key's deliveries run one at a
// time, in the order they arrive, on the key's partition; other keys run
// in parallel, up to [WithWorkers] handlers at once (S3). A message is
// acked only after its handler returns nil (S4).
//
// # Failure
//
// A failed handler call is retried after a backoff, while the key waits
// on a timer and its worker runs other keys. When the message's attempts,
// counted across deliveries in [Delivery.Attempt], run out, or the
// handler returns [Permanent], the message is nacked together with its
// key's queued deliveries, which do not run, and the key is held until the
// service brings the failed message back; other keys go on (S5, S9). A
// handler can also ask for its next call after a delay with [RetryAfter].
// The service redelivers a nacked message with every later message of its
// key, acknowledged ones included; those already processed are acked
// without running the handler again (S6). [Subscription.HeldKeys],
// [Subscription.Stats] and [WithKeyEvents] show what is held, and why.
//
// # Parking
//
// With [WithParking], a message that fails for good parks its key instead:
// it and every later message of the key are copied, in order, to the
// parking topic and acked, and the key's new messages follow them there,
// on every process receiving the subscription, until
// [Subscription.Release] runs them through the handler, in order, each
// once. [Subscription.Parked] lists the parked keys. The state is kept in
// Pub/Sub, on a control topic every Receive replays and follows, so a
// program that runs no Receive, such as an operator's command, can list
// the parked keys and release one: its Release, or
// [Subscription.RequestRelease], records a request there, and a Receive of
// the subscription, on any process, carries it out. See the
// project's FIGURES.md for how holding, the service's dead-lettering
// ([WithDeadLetterPolicy]) and parking compare.
//
// # Regions
//
// The service keeps a key's order only among the messages published to
// one region, and its global endpoint routes each client to a region near
// it. Receiving is not affected: a subscriber may connect to any region.
// Parking is: its control log is a topic whose events must keep their
// order, so with [WithParking] every process of the subscription passes
// [CreateWithTopic] or [Open] a client pinned to the same region, with
// [RegionalEndpoint], which leaves a client for the emulator
// (PUBSUB_EMULATOR_HOST) as it is.
//
// # Turning parking on and off
//
// Every process that receives a parking subscription must park, to the
// same topic. The subscription records it in its label [LabelParking],
// set by the first [CreateWithTopic] or [Open] with [WithParking]; from
// then on, one without WithParking, or with another topic, fails with
// [ErrInvalidConfig] before it receives anything. On a running
// deployment:
//
//  1. On: deploy the version with WithParking. Its first process labels
//     the subscription, and old processes that restart are refused. Old
//     processes still running go on without parking until they are
//     replaced: while both run, a key parked by a new process may have a
//     later message run by an old one, so let the old ones go first (a
//     "Recreate" rollout) if that matters.
//  2. Off: release every parked key ([Subscription.Parked] lists none),
//     stop the processes with WithParking, remove the label
//     (gcloud pubsub subscriptions update SUB
//     --remove-labels=keyorder-parking), then start processes without it.
//  3. Another parking topic: turn parking off, then on with the new topic.
//
// # Room
//
// A key that is stuck, failing or slow, cannot fill the official client's
// flow-control window with its backlog: past [WithKeyBacklog], its
// deliveries are nacked and come back later, in order (S10).
//
// # Settling
//
// Every delivery is acked or nacked exactly once, whatever the handler or
// a callback does, a panic or runtime.Goexit included (S11).
//
// # Unordered subscriptions
//
// An existing subscription keeps its ordering setting, which cannot be
// changed after creation; [Subscription.Ordered] reports it. On an
// unordered subscription the service delivers a key's messages in any
// order and possibly at once to several clients. Receive still runs each
// key on one partition, one delivery at a time, in the order deliveries
// arrive, but that is not publish order, and a failure does not hold the
// key (S8).
//
// # Shutdown
//
// Receive returns when its context ends, after nacking what was queued
// and letting running handlers finish within a drain timeout (S7): within
// the drain timeout plus [ShutdownBound], whatever the server does.
//
// # Sequence numbers
//
// A producer may stamp each keyed message with its ID and the message's
// number in its sequence for the key ([ordering.Stamp]); keyorder's
// publisher does by default. [Delivery.Producer] and [Delivery.Seq] report
// it. On an ordered subscription, a delivery whose number was processed
// already is a copy, as a publish retried after a lost response stores it
// under a new message ID: it is acked without calling the handler. A
// number past the next is a gap, told to [WithGapHandler], and the message
// is processed as usual. A number of a new epoch ([ordering.SplitSeq])
// starts a new run from 1: the producer counted the key afresh.
// The state is bounded by [WithSequenceWindow] (S12). Across restarts, the
// handler's own store can make effects exactly-once: a transaction that
// applies the effect only if it moves the key's last applied Seq forward
// (see examples/inbox).
//
// What a process can know is what passed through it. Silence is no start:
// the numbers before the first one a Receive sees of a (key, producer)
// were never seen here, and below it only the service's order proves a
// number a copy; on a server that redelivers out of order
// ([WithUnorderedRedelivery]), and for a message redriven from a
// dead-letter topic, nothing is a copy unless this process recorded it
// run. A gap is certain ([Stats.Gaps], at Warn, once a minute at most per
// key and producer) only when the key's earlier message was still here
// when the one after the gap arrived; a key that had nothing here may
// have been on another client, so its gaps are uncertain
// ([Stats.UncertainGaps], at Info). With several replicas, the authority on
// what is missing is a store they share: package inbox's counts and gap
// reports, not these.
//
// Whoever may publish to the topic can write a stamp. [WithStampKey]
// verifies each stamp's signature ([ordering.StampKeys]) on every door: a
// stamp whose signature is missing or wrong is no stamp, the message runs
// as unstamped, and it is counted in [Stats.Unverified] (DESIGN.md,
// Security model).
//
// # Replay
//
// [Replay] reads a topic's history, from a time up to the moment it was
// called, once, in order per key, on a subscription of its own that it
// seeks, acks and deletes, and returns once it has caught up (S13):
//
//	err := subscriber.Replay(ctx, client, "orders", launch, func(ctx context.Context, d *subscriber.Delivery) error {
//		return total.add(d.Key, d.Data)
//	})
//
// # Observability
//
// Receive reports through the OpenTelemetry metric API and log/slog, from
// the events it already has: a message settled, a handler call ended, a
// key held or released. [WithMeterProvider] sets where metrics go; by
// default the global provider, which does nothing until the application
// installs one. The instruments, whose points all carry the attribute
// messaging.destination.subscription.name and never a key:
//
//   - keyorder.subscriber.deliveries (counter): messages settled, by
//     keyorder.outcome (acked, deduplicated, nacked, held, dead_lettered,
//     and parked: moved to the parking topic with [WithParking]) and
//     keyorder.reason (failed, room, shutdown, tail, hold, replay_range);
//   - keyorder.subscriber.handler.duration (histogram, s): handler calls,
//     by keyorder.outcome ok, error or panic;
//   - keyorder.subscriber.unverified_stamps (counter): deliveries whose
//     stamp's signature was missing or wrong, with [WithStampKey];
//   - keyorder.subscriber.held_keys, keyorder.subscriber.queued and
//     keyorder.subscriber.oldest_unacked.age (gauges; the last in s),
//     observed while Receive runs.
//
// [WithLogger] sets the logger, slog.Default() by default: holds, parks,
// failures for good and sequence gaps at Warn, releases and unparks at
// Info, panics at Error with their stack, a run of copies found by their
// stamps once at Info, and each failed call at Debug; nothing per message
// at Info.
//
// The handler's ctx carries the values of the official client's context
// for the message, so when the client traces
// (pubsub.ClientConfig.EnableOpenTelemetryTracing), the message's span is
// in ctx and the handler's own spans are its children.
//
// [Subscription.Stats] lists the busiest partitions and the hot keys, by
// local backlog and by age; package statuspage serves it as a live page.
//
// Rule numbers refer to the ordering contract in the project's DESIGN.md.
package subscriber

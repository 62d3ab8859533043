// Package publisher publishes messages to Google Cloud Pub/Sub in order per
// key, batching them itself on the Publish RPC of the official
// cloud.google.com/go/pubsub/v2 client.
//
//	p, err := publisher.New(client, "orders")
//	if err != nil {
//		return err
//	}
//	defer p.Close(ctx)
//
//	res := p.Publish(ctx, &publisher.Message{
//		Data:    []byte(`{"order":42}`),
//		Headers: map[string]string{"partition-key": "customer-7", "kind": "created"},
//	})
//	id, err := res.Get(ctx)
//
// # Ordering keys
//
// A message's key is the first non-empty of the call's [WithOrderingKey],
// its "partition-key" header ([ordering.Header]) and the publisher's
// [WithDefaultOrderingKey] (rule P1). The key travels as the Pub/Sub
// ordering key, never as an attribute; every other header becomes an
// attribute (P2). Messages with no key are unordered. A default key puts
// every message without a key of its own on that one key, which has one
// batch in flight and about 1 MB/s: see [WithDefaultOrderingKey].
//
// # Order and failure
//
// Messages of one key reach the topic in the order of their Publish calls,
// one batch in flight at a time (P3). If a message fails, every later
// message of its key already published fails with it, so nothing published
// after the failed message can overtake it (P4); the key then resumes by
// itself, and the next Publish call is sent normally (P5). The error, a
// [*PublishError], names the key and the cause. [Retryable] tells whether
// the cause is transient (Unavailable once the client's retries are spent)
// or permanent (NotFound, PermissionDenied, InvalidArgument), and
// [Publisher.Retry] sends a failed tail again, in order, in one call:
//
//	retried, err := p.Retry(ctx, failed...)
//
// Invalid messages fail with a [*ValidationError] before anything is sent,
// and do not affect their key (P6).
//
// # Regions
//
// The service keeps a key's order only among the messages published to
// one region: two publishers of a key whose requests reach two regions
// (the global endpoint routes each client to a region near it) may have
// their messages stored and delivered in either order, whatever keyorder
// does. Publish each key from one region: run its publishers there, or
// pin their clients to one region's locational endpoint, with
// option.WithEndpoint("<region>-pubsub.googleapis.com:443") (see the
// example of [New]). Subscribers may connect to any region.
//
// # Stamps
//
// Every keyed message carries one attribute, [ordering.StampAttribute],
// with its producer's ID and its number in the producer's sequence for its
// key ([ordering.Stamp]), so that a subscriber can ack unrun a copy the
// service stored twice and report the numbers that never arrived (S12 and
// P9). Each Publisher is a
// producer of its own ([Publisher.Producer], [WithProducerID]), numbers
// each key's messages from 1 in publish order, and never gives a number
// twice: [Publisher.Retry] numbers a failed tail anew, and a key whose
// counter was dropped (the counters of the 16,384 most recently idle keys
// are kept, P7) is counted again in a higher epoch. The stamp counts
// against the service's limits (P6); [WithoutStamps] turns it off.
//
// [WithStampKey] signs each stamp with a key the subscribers share
// ([ordering.StampKeys]): one attribute more, [ordering.SignatureAttribute],
// which binds the stamp to the message's key and data, so that whoever
// may publish to the topic without the key cannot make a subscriber skip
// a message by forging or copying a stamp. The signature counts against
// the limits too.
//
// # Batching
//
// The publisher batches for itself, on the client's TopicAdminClient: the
// same connections, credentials, endpoint, retry settings and
// PUBSUB_EMULATOR_HOST as the official client's Publisher. A request
// carries the messages of one key (the service refuses a request whose
// messages have different ordering keys), and a key has one request in
// flight at a time (P3). While it flies, the key's new messages gather,
// and when it returns they go out at once, up to 1,000 messages and 10 MB
// a request, the service's limits, in requests of their own. A key with
// nothing in flight lingers before its first request, so that the messages
// published right after its first go with it: until about 1 ms passes
// without a Publish call, and at most 5 ms. Unordered messages
// batch alike, with any number of requests in flight.
//
// At most 100 requests are in flight per connection of the client's pool
// (GOMAXPROCS, at most 4, as the client dials it), the concurrent streams
// one HTTP/2 connection to the service carries: 200 on two cores, 400 from
// four. The keys ready beyond that wait their turn, in the order they
// became ready. [WithPublishSettings] tunes all of it.
//
// A request is retried as the official client retries it: with the
// client's retry settings, apiv1's by default (Aborted, Canceled,
// Internal, ResourceExhausted, Unknown, Unavailable and DeadlineExceeded,
// backing off from 100 ms to 60 s), but not Internal "invalid UTF-8", for
// at most the publish Timeout; it is compressed with gzip when asked, and
// carries the client's x-goog-pubsub-client-telemetry header. The client's
// gRPC interceptors and OpenTelemetry gRPC instrumentation see every
// request. On a client made with EnableOpenTelemetryTracing, each message
// has the official Publisher's "<topic ID> create" span, a producer span
// that is a child of the span in Publish's ctx and ends with the message's
// ID or its error, and carries its trace context in its attributes
// (googclient_traceparent, as the official client injects it), so that a
// subscriber's spans join the publisher's trace. Those attributes count
// against the message's limits. A message sent again by [Publisher.Retry]
// keeps the trace context of its first Publish. The official Publisher's
// other spans (flow control, batching, the publish RPC span per batch)
// and its OpenCensus views are not made: [WithMeterProvider]'s metrics
// stand for them.
//
// [Publisher.Flush] sends what lingers now and waits for the results;
// [Publisher.Close] does the same and stops the publisher. Both are
// bounded by their context.
//
// # Cost
//
// A key with nothing outstanding leaves no state behind (P7), but for its
// stamp counter, kept among the 16,384 most recently idle (about 100 bytes
// each). A key with messages outstanding costs a queue of 160 bytes and
// its map entry, and each message a [Result] of 192 bytes, which holds the message
// as the request carries it, and lets go of its data once it is published.
// A request costs its slice of messages; a Result makes a channel only for
// a caller that waits on a pending one. No goroutine waits per key or per
// message: the senders, one per request in flight, take the keys ready in
// turn, and one timer looks at the lingering keys every millisecond.
//
// A stamp adds one attribute: a map of the message's own and its value,
// about 1 µs a message to build; the publisher encodes its requests
// without protobuf's reflection, which makes the entry's encoding about
// 0.5 µs rather than 1.4. See FIGURES.md, the publisher, for the figures
// against the official client.
//
// # Observability
//
// A publisher reports through the OpenTelemetry metric API and log/slog,
// from the events it already has: a message refused by Publish, a Result
// settled when its request returns, a key's failed tail. The
// metrics go to [WithMeterProvider]'s provider, by default the global one,
// which does nothing until the application installs one; the meter is
// "github.com/keyorder/keyorder/publisher", and every data point carries
// messaging.destination.name, the topic's full name. No attribute carries
// a key, since keys are unbounded.
//
//   - keyorder.publisher.messages, a counter of {message}, by
//     keyorder.outcome: "published"; "failed", a [*PublishError] that is
//     not Skipped; "skipped", the tail that failed with it (P4); and
//     "invalid", refused by Publish with nothing sent: a
//     [*ValidationError] (P6), a flow-control refusal or a ctx that ended
//     while waiting for room, or [ErrClosed]. Each Result of Publish or
//     Retry is counted once, before it is ready.
//   - keyorder.publisher.publish.duration, a histogram in s, by
//     keyorder.outcome: from the Publish (or Retry) call to the Result,
//     for each message of a key that was queued (not for unordered
//     messages), so published, failed and skipped; not for invalid ones,
//     whose Result is ready when Publish returns.
//   - keyorder.publisher.paused_keys, a gauge of {key}: keys whose failed
//     tail is being failed. A key's tail fails at once, with the failure,
//     so the gauge is 0 but for that moment.
//   - keyorder.publisher.hot_keys, a counter of {key}: keys found
//     publishing faster than the service takes, one per warning.
//
// [WithLogger]'s logger, by default slog.Default() as it is when New runs,
// gets every record with the topic: a key's failure at Warn ("key paused",
// with the key, the error and how many messages failed with it), for the
// first failure of an episode, the failures until a message of the key is
// published, which is logged at Info ("key resumed", with the count of
// the episode's pauses): a key failing every send, as on a missing topic,
// logs once, not per failure. A hot key is logged at Warn, once per
// episode. Nothing is logged per message.
//
// The service takes about 1 MB/s per ordering key. A key is hot when the
// messages published on it within one 5-second window add up to more than
// 5 MB, encoded: faster than 1 MB/s on average over the window, which the
// service needs at least 5 s to take. Windows tumble from the key's first
// message with nothing else outstanding, and are counted in the key's queue,
// which lives while the key has messages outstanding: an episode is the
// life of the queue, so a key that stays hot warns once, and again only
// after it has had nothing outstanding. A key whose messages are all done
// before its next one starts counting afresh: it is not over the
// service's limit, or its messages would queue.
//
// Rule numbers refer to the ordering contract in the project's DESIGN.md.
package publisher

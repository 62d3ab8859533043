// Package publisher publishes messages to Google Cloud Pub/Sub in order per
// key, on top of the official cloud.google.com/go/pubsub/v2 client.
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
// itself, and the next Publish call is sent normally (P5). The caller never
// calls the official client's ResumePublish. The error, a [*PublishError],
// names the key and the cause. [Retryable] tells whether the cause is
// transient (Unavailable once the official client's own retries are spent)
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
// # Flushing and closing
//
// The official client batches messages by count, size and delay (see
// [WithPublishSettings]). [Publisher.Flush] sends what is batched now and
// waits for the results; [Publisher.Close] does the same and stops the
// publisher. Both are bounded by their context.
//
// # Cost
//
// A key with nothing outstanding leaves no state behind (P7), but for its
// stamp counter, kept among the 16,384 most recently idle (about 100 bytes
// each). A key with messages in flight costs a gate of 248 bytes, and each
// message a [Result] of 192 bytes, which lets go of the message's data
// once it is published.
//
// The official client offers no callback when a result is ready, only a
// channel per message to wait on, so someone must wait. Where a caller
// waits with [Result.Get], it waits on the official result itself, on the
// caller's goroutine, and settles every done message of the key; the
// key's next Publish settles what is done too, and a timer per shard,
// every 0.1 s, settles the keys no one looks at, so that their gates go
// within about 0.2 s of their last answer. A key gets a goroutine of its
// own, waking once per batch, only when that is the only way to keep a
// promise: under flow control, whose room comes back as each message is
// done (P8); with the duration metric on, which times the service's
// answer rather than the caller's look; once a message of the key has
// failed (P4, P5); when [Result.Ready] is asked for a pending result;
// during Flush and Close; and for a key gone quiet with messages still in
// flight. A goroutine per key in flight, parked, costs the garbage
// collector a stack scan each cycle, about a third of keyorder's own work
// per message before it was avoided.
//
// Publish adds about 0.5 µs of CPU per call to the official client's own
// Publish, and settling a Result about 0.25 µs more. In batches of 10,
// keyorder spends about 5% more CPU per message than the official client
// alone, 7% more stamped than the official client carrying the same
// stamp; in bursts, where a slower Publish loop means smaller batches, 16
// to 19% (FIGURES.md, Performance). A stamp adds one attribute, which
// costs the official client about 17 allocations and 610 bytes per
// message, in protobuf's reflective encoding of the attribute map, and 17
// to 30% of its CPU per message; keyorder's own part of it is half an
// allocation.
//
// # Observability
//
// A publisher reports through the OpenTelemetry metric API and log/slog,
// from the events it already has: a message refused by Publish, a Result
// settled by its key's gate, a key paused by a failure and resumed. The
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
//     Retry is counted once, before it is ready; an unordered message,
//     whose Result is the official client's own, once the publisher's
//     watch sees it done, and at the latest when Flush or Close returns.
//     Without the duration metric, a key's message is counted when it is
//     settled (see Cost): when a caller looks, or within about 0.2 s.
//   - keyorder.publisher.publish.duration, a histogram in s, by
//     keyorder.outcome: from the Publish (or Retry) call to the Result,
//     for each message of a key handed to the official client (not for
//     unordered messages, which the watch may see done late), so
//     published, failed and skipped; not for invalid ones, whose Result
//     is ready when Publish returns.
//   - keyorder.publisher.paused_keys, a gauge of {key}: keys whose failed
//     tail is draining, their later messages held (P5).
//   - keyorder.publisher.hot_keys, a counter of {key}: keys found
//     publishing faster than the service takes, one per warning.
//
// [WithLogger]'s logger, by default slog.Default() as it is when New runs,
// gets every record with the topic: a key's failure at Warn ("key paused",
// with the key, the error and how many messages failed with it) and its
// resume at Info ("key resumed", with how many held messages it sent),
// once per failure; and a hot key at Warn, once per episode. Nothing is
// logged per message.
//
// The service takes about 1 MB/s per ordering key. A key is hot when the
// messages published on it within one 5-second window add up to more than
// 5 MB, encoded: faster than 1 MB/s on average over the window, which the
// service needs at least 5 s to take. Windows tumble from the key's first
// message with nothing else outstanding, and are counted in the key's gate,
// which lives while the key has messages outstanding: an episode is the
// life of the gate, so a key that stays hot warns once, and again only
// after it has had nothing outstanding. A key whose messages are all done
// before its next one starts counting afresh: it is not over the
// service's limit, or its messages would queue.
//
// Rule numbers refer to the ordering contract in the project's DESIGN.md.
package publisher

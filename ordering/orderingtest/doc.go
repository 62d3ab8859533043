// Package orderingtest is an in-process Pub/Sub server for tests that
// models message ordering, redelivery and failure the way the service does,
// fast enough to use in every test, and a checker of per-key order.
//
// pstest, the official fake, delivers a key's messages one at a time, the
// next only after an ack, on a 10 ms ticker, and never redelivers a key's
// tail. A subscriber that mishandles redelivered tails, failures or
// several outstanding messages of a key passes on pstest and breaks on the
// service. This server behaves as the service does in those cases, and
// injects the failures the service may produce on request.
//
// Start it in two lines and connect the official client in one more:
//
//	srv := orderingtest.NewServer(orderingtest.WithAckDeadline(500 * time.Millisecond))
//	defer srv.Close()
//	client, err := srv.Client(ctx, "my-project")
//
// In a test, [Start] fails the test if the server cannot start and closes
// it when the test ends:
//
//	srv := orderingtest.Start(t)
//
// Any client can use it: [Server.ClientOptions] points a Google Cloud
// client at it, and other languages' clients reach [Server.Addr] as an
// emulator (PUBSUB_EMULATOR_HOST). The program examples/emulator in this
// module serves it as a standalone process, with its faults as flags and
// an HTTP control endpoint.
//
// # What it serves
//
// The parts of the Publisher and Subscriber services that clients use:
// topics (create, get, delete, list, list subscriptions), subscriptions
// (create, get, update, delete, list), Publish, StreamingPull, Pull,
// Acknowledge, ModifyAckDeadline, and Seek to a time. Other RPCs return
// Unimplemented. Push subscriptions get HTTP requests: see Push below.
//
// # Fidelity
//
// Each behaviour follows a documented behaviour of the service:
//
//   - Ordered subscriptions deliver a key's messages in publish order, and
//     several of them may be outstanding at once. A key stays on one
//     StreamingPull stream while it has messages outstanding and may move
//     when it has none. Pull hands out one batch per key at a time ("only
//     one batch of messages can be outstanding for an ordering key at a
//     time").
//   - When a message of a key is nacked or its lease expires, it and every
//     later message of the key are delivered again, in order, acknowledged
//     ones included ("redeliveries of a message trigger redelivery of all
//     subsequent messages for that key, even acknowledged ones").
//   - Unordered subscriptions, and messages without a key, go to any stream
//     with room, in no promised order.
//   - Leases last the stream's ack deadline (the subscription's for Pull
//     and push); ModifyAckDeadline extends them, and 0 nacks.
//     [WithAckDeadline] shrinks them for tests. Streams honour
//     MaxOutstandingMessages and MaxOutstandingBytes, and responses carry
//     up to 1000 messages.
//   - After max_delivery_attempts a message is forwarded to the dead-letter
//     topic and removed from the subscription: no later tail redelivery
//     brings it back. Its key goes on without it, so order is not kept, as
//     the service warns. delivery_attempt is set only on subscriptions with
//     a dead-letter policy. The forwarded message keeps its data,
//     attributes and ordering key, and gets the attributes the service
//     adds: CloudPubSubDeadLetterSourceDeliveryCount (the delivery
//     attempts), CloudPubSubDeadLetterSourceSubscription (the source
//     subscription's ID), CloudPubSubDeadLetterSourceSubscriptionProject
//     (its project's ID) and CloudPubSubDeadLetterSourceTopicPublishTime
//     (the original publish time, RFC 3339 in UTC to the millisecond, as
//     in "2021-04-08T09:33:30.425+00:00").
//   - On subscriptions with exactly-once delivery, acks and modacks of stale
//     ack IDs fail per ack ID in the error format the official client
//     parses, successful acks are final, and acknowledged messages are
//     never resent, not even with their key's tail. See [AckFailure].
//   - Seek to a time marks what was published before it as acknowledged and
//     delivers the rest again, payload intact. It reaches as far back as the
//     subscription's retained acknowledged messages (retain_acked_messages)
//     or the topic's message retention, so a subscription created later
//     can seek to before it existed on a topic with retention. On a topic
//     without retention the Seek succeeds, on the service as here, but
//     brings back nothing the subscription never held: check the topic's
//     message_retention_duration (also reported on its subscriptions as
//     topic_message_retention_duration) before relying on it.
//   - Subscriptions are validated and completed as the service does it:
//     ack deadlines of 10 to 600 s (default 10 s), message retention of
//     10 minutes to 31 days (default 7 days), an expiration policy with a
//     ttl of at least a day and no shorter than the retention (default 31
//     days; a policy without a ttl never expires), and message ordering
//     fixed at creation.
//   - Publish enforces the service's limits with its status codes, and a
//     rejected request stores nothing.
//   - A subscription's filter admits only the messages whose attributes
//     match it; the others are never delivered, nor sought back, as if
//     acknowledged. The part of the filter language modelled is
//     attributes.name = "value" and attributes:name, joined by AND or by
//     OR, within the service's 256 bytes; the rest (NOT, !=, hasPrefix,
//     parentheses) is Unimplemented.
//   - A deleted topic's subscriptions remain, report the topic as
//     "_deleted-topic_" and receive nothing new. A deleted subscription is
//     gone from ListTopicSubscriptions at once.
//   - Retry policies are validated and completed as the service does it:
//     backoffs of 0 to 600 s, the minimum no greater than the maximum
//     (defaults 10 s and 600 s). Push follows them; see Push.
//   - [WithLatency] gives publishes and deliveries the round trips they
//     take on the service: a Publish answers d later, and a message
//     reaches a subscriber d after it became deliverable, so a design that
//     waits for a round trip per message shows its cost in tests and
//     benchmarks. Messages in flight together wait together: latency does
//     not cut throughput to one message per d.
//   - [WithEmulatorRedelivery] redelivers as Google's emulator does rather
//     than as the service does: a nacked or expired message of an ordered
//     key comes again by itself, in the order the nacks arrived, without
//     its key's tail; and the official client sends a nack request's ack
//     IDs from a map, so that order is random. A subscriber that keeps a
//     key's order only because the service resends the tail in order
//     fails its tests with it.
//
// # Faults
//
// Methods of [Server] inject, by name, what the service may do:
//
//   - [Server.FailPublish]: a publish fails and stores nothing.
//   - [Server.LosePublishResponses]: a publish is stored, then fails, so a
//     retry stores it twice under two message IDs.
//   - [Server.HoldPublish]: publishes wait until released.
//   - [Server.DropAcks]: an ack is accepted but does not persist, and the
//     key's tail comes back when the lease runs out.
//   - [Server.FailAcks]: on exactly-once subscriptions, an ack fails,
//     transiently or for good.
//   - [Server.DuplicateDeliveries]: a message is delivered twice in a row.
//   - [Server.RedeliverKey]: a key's tail is redelivered now.
//   - [Server.BreakStreams]: open streams end with Unavailable, and the
//     client opens new ones.
//
// Faults that fire on messages take a [Match]: [Key], [Data] or
// [AnyMessage]. Each returns a [Fault] that counts its firings and can be
// awaited and removed.
//
// A server that is gone or hangs is a [Link]'s: clients dial [StartLink]'s
// address instead of the server's, and [Link.Hang] stops every byte
// between them, [Link.Cut] closes every connection, and [Link.Restore]
// undoes either. It relays TCP, so it stands in front of pstest or
// Google's emulator as well.
//
// # Push
//
// A subscription created with a push endpoint gets each message as an HTTP
// POST, as the service sends it ("Receive messages using push"):
//
//   - At most one message of an ordering key is outstanding at a time: the
//     key's next message goes once the endpoint acknowledged the previous
//     one, or it was dead-lettered. Messages of other keys, and messages
//     without order, go side by side, up to 32 requests in flight per
//     subscription.
//   - The body is the JSON envelope the service sends: {"message":
//     {"attributes", "data" (base64), "messageId", "message_id",
//     "publishTime", "publish_time", "orderingKey"}, "subscription",
//     "deliveryAttempt"}, with deliveryAttempt only on subscriptions with a
//     dead-letter policy and empty fields left out. With NoWrapper the body
//     is the data, and with write_metadata the attributes travel as headers
//     of their own names (those that can be header names) and the metadata
//     as x-goog-pubsub-subscription-name, -message-id, -publish-time,
//     -ordering-key and -delivery-attempt headers.
//   - 102, 200, 201, 202 and 204 acknowledge; any other answer, a
//     redirect included, or none at all, is a nack, counted in
//     Stats.Nacked. A request not answered within the ack deadline (the
//     subscription's, or WithAckDeadline's) is cancelled, and its lease
//     expires, counted in Stats.Expired.
//   - A failed message is pushed again after a backoff that doubles with
//     each failure from the retry policy's minimum to its maximum or,
//     without a retry policy, from 100 ms to 60 s, the bounds of the
//     service's push backoff. Give a test's subscription a small retry
//     policy to keep it quick. Dead-lettering, delivery attempts,
//     Deliveries and Stats work as on pull.
//   - With an OIDC token, each request carries "Authorization: Bearer"
//     and a JWT signed RS256 by the server's own key, with a kid, and the
//     claims of Google's push tokens: iss https://accounts.google.com, aud
//     (the token's audience or, without one, the endpoint's URL), email
//     and email_verified, sub and azp, iat, and exp an hour later.
//     [Server.TokenValidator] returns a real idtoken validator that trusts
//     that key, so that an endpoint's production verification runs in
//     tests. [Server.PushClaims], [Server.SignToken] and
//     [Server.ForgeToken] make the tokens an endpoint must refuse.
//   - Endpoints must be absolute URLs. The service takes only https; the
//     fake also takes http, as the emulator does, since tests serve
//     endpoints with httptest. For https endpoints with a test's
//     certificate, see [WithPushClient].
//   - Deleting the subscription, or closing the server, cancels the
//     requests in flight.
//
// # Observation
//
// [Server.Messages] lists what was published to a topic, [Server.Deliveries]
// what was delivered on a subscription, [Server.Stats] its counters, and
// [Server.Subscriptions] which exist. [Server.WaitFor] blocks until a
// condition on them holds, so tests wait for the server instead of
// sleeping.
//
// # Checking order
//
// A [Checker] takes the (key, sequence) records of what a handler
// processed, or of what the server delivered, and reports per key what
// came out of order, twice or not at all. [AllowRedelivery] accepts the
// repeated tails Pub/Sub delivers.
//
// # Not modelled
//
// Snapshots; filters beyond attribute equality and presence; BigQuery and
// Cloud Storage subscriptions; schemas and message transforms; UpdateTopic
// of fields other than labels and message retention;
// retry policy backoff on pull (redelivery is immediate there); the expiry
// of idle subscriptions (the expiration policy is reported, never applied);
// the expiry of unacknowledged messages after the subscription's
// retention; publish throughput quotas, including about 1 MB/s per
// ordering key; latency's jitter, and latency on acks, deadline changes
// and admin calls (with WithLatency they take effect at once); the
// acknowledge confirmations the service sends on a StreamingPull stream of
// an exactly-once subscription (acks sent on the stream are applied, but
// not confirmed there).
//
// Of push: changing a subscription's push configuration (ModifyPushConfig
// is Unimplemented, and UpdateSubscription refuses push_config), and
// turning push into pull or back; push flow control, by which the service
// adapts how many requests it has in flight to the endpoint's answers (the
// fake keeps to 32), and its push backoff across a whole subscription (the
// fake backs off per message); the v1beta1 push format (x-goog-version is
// reported, and v1 is sent whatever it says); and the attributes that
// cannot be HTTP header names, which an unwrapped request with metadata
// leaves out. The fake also serves Pull and StreamingPull on a push
// subscription, beside its pushes: do not rely on that.
//
// # Compared with pstest and Google's emulator
//
// What the three in-process or local servers do of the features keyorder
// uses, as go run ./examples/emulator -check ADDR measures it (pstest of
// cloud.google.com/go/pubsub/v2 v2.9.0; Google's emulator 0.8.20, from
// the Cloud SDK's pubsub-emulator, run with gcloud beta emulators pubsub
// start). "yes" is what the service does.
//
//	feature                                 this fake  pstest  Google's emulator
//	ordered subscriptions                   yes        yes     yes
//	topic message retention                 yes        yes     yes
//	subscription filters                    yes        yes     no: accepted, not applied
//	a nack redelivers the key's tail        yes        no (1)  no: the nacked message only
//	dead-letter policy                      yes        yes     yes
//	exactly-once delivery                   yes        yes     yes
//	keys come back after a consumer restart yes        yes     no (4)
//	push requests carry an OIDC token       yes        no (2)  no
//	push requests carry the ordering key    yes        no (2)  no
//	Seek to a time, ordered subscription    yes        no (3)  no: Unimplemented
//
// (1) pstest hands out a key's next message only once the one before is
// acked, so a nack never has a tail to redeliver. (2) pstest does not push.
// (3) pstest accepts the Seek and then redelivers nothing; with more calls
// after it, it failed on a nil pointer in its maintainMessages. (4) A
// consumer died with messages of 20 keys outstanding, and a new one
// started: 8 keys came back, the other 12 not after 90 s.
//
// So parking (subscriber.WithParking) and Replay, which read back with
// filters and Seek, need this fake or the service; CreateWithTopic and
// Open with parking refuse the others with an error naming the missing
// call. On Google's emulator a failed key's later messages are not
// redelivered with it ([WithEmulatorRedelivery] models that here; the
// subscriber keeps the key's order all the same), and push cannot be
// authenticated (WithUnauthenticatedPush) nor kept in order by key.
//
// # Google's emulator and restarts
//
// Google's emulator never cleans up a stopped subscriber's stream: the
// ordered keys that had messages outstanding on it stall after the
// consumer restarts, for good, with the official client alone as with
// keyorder. A test that stops a consumer and starts another (a restart, a
// deploy, a hand-over of keys between processes) cannot tell that stall
// from lost messages on the emulator: run such tests on this fake, which
// hands a dead stream's messages on once their leases run out, as the
// service does. go run ./examples/emulator -check ADDR probes a server
// for it.
//
// # Cost
//
// The server keeps every published message and a [Delivery] record per
// delivery for the life of the Server, which suits tests, not long runs.
// With the official client's default settings it receives about 10,000
// messages a second on one stream, bound by the client's flow control as
// on the service; pstest receives about 100. A push subscription runs 32
// goroutines while it exists. The first push with an OIDC token, or the
// first call of TokenValidator, SignToken or ForgeToken, makes a 2048-bit
// RSA key: some tens of milliseconds. A server that neither pushes nor
// delays pays for neither.
package orderingtest

// Package orderingtest is an in-process Pub/Sub server for tests that models
// message ordering the way the service does, fast enough to use everywhere.
//
// pstest, the official fake, delivers one message per key at a time on a
// 10 ms ticker and never redelivers a key's tail, so a subscriber that
// mishandles redelivered tails or failures passes on it and breaks on the
// service (rules S5 and S6 of the ordering contract in the project's
// README). Use this server wherever that matters:
//
//	srv := orderingtest.NewServer(orderingtest.WithAckDeadline(200 * time.Millisecond))
//	defer srv.Close()
//	client, err := pubsub.NewClient(ctx, "p",
//		option.WithEndpoint(srv.Addr),
//		option.WithoutAuthentication(),
//		option.WithGRPCDialOption(grpc.WithTransportCredentials(insecure.NewCredentials())))
//
// internal/harness.Fake does the same for the length of a test.
//
// # What it serves
//
// The parts of the Publisher and Subscriber services that the official
// client uses: topics (create, get, delete, list, list subscriptions),
// subscriptions (create, get, update, delete, list), Publish,
// StreamingPull, Pull, Acknowledge, ModifyAckDeadline, and Seek to a time.
// Other RPCs return Unimplemented.
//
// # Semantics
//
// Each follows a documented behaviour of the service:
//
//   - Ordered subscriptions deliver a key's messages in publish order, and
//     several of them may be outstanding at once. A key stays on one
//     StreamingPull stream while it has messages outstanding and may move
//     when it has none. Pull hands out one batch per key at a time.
//   - When a message of a key is nacked or its lease expires, it and every
//     later message of the key are delivered again in order, acknowledged
//     ones included. Acknowledged messages are kept until every earlier
//     message of their key is acknowledged.
//   - Unordered subscriptions, and messages without a key, go to any stream
//     with room, in no promised order.
//   - Leases last the stream's ack deadline (the subscription's for Pull),
//     ModifyAckDeadline extends them and 0 nacks. A single timer expires
//     them; nothing polls. WithAckDeadline shrinks them for tests.
//   - Streams honour MaxOutstandingMessages and MaxOutstandingBytes, and
//     responses carry up to 1000 messages.
//   - Topic retention and retain_acked_messages are honoured by Seek, so a
//     new subscription can seek to a time before it existed.
//   - After max_delivery_attempts, a message is forwarded to the dead-letter
//     topic and its key goes on without it: order is not kept, as the
//     service warns. delivery_attempt is set only with a dead-letter policy.
//   - Publish enforces the service's limits with its status codes, and a
//     rejected request stores nothing.
//
// # Faults and observation
//
// Methods on Server inject the failures the service may produce, and expose
// what happened so tests can wait for conditions instead of sleeping:
// FailPublish, HoldPublish, DropAcks, DuplicateDeliveries, RedeliverKey and
// BreakStreams; Messages, Deliveries, Stats and WaitFor.
//
// # Not modelled
//
// Snapshots, filters, push and export subscriptions, exactly-once delivery
// (the setting is reported to clients, not enforced), retry policy backoff
// (redelivery is immediate), expiry of unacknowledged messages after the
// subscription's retention, and the attributes the service adds to
// dead-lettered messages.
//
// # Cost
//
// The server keeps every published message and a Delivery record per
// delivery for the life of the Server, which suits tests, not long runs.
package orderingtest

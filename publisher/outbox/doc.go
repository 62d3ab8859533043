// Package outbox is a transactional outbox for keyorder's [publisher]: a
// service writes its events in the same database transaction as the
// changes they announce, and a [Relay] publishes them afterwards, key by
// key in commit order, each once as far as subscribers can tell.
//
//	ob, err := outbox.New(ctx, db, outbox.PostgreSQL)
//	...
//	tx, _ := db.BeginTx(ctx, nil)
//	// ... the change ...
//	err = ob.Add(ctx, tx, "account-42", &publisher.Message{Data: event})
//	err = tx.Commit()
//
//	pub, _ := publisher.New(client, "events", publisher.WithoutStamps())
//	relay, _ := outbox.NewRelay(ob, pub)
//	err = relay.Run(ctx) // until ctx ends
//
// The package speaks only database/sql: open the database with the driver
// of your choice and name its [Dialect].
//
// # Subscription first, then relays
//
// A relay publishes into the topic, and Pub/Sub keeps a message only for
// the subscriptions that exist when it is published: create the
// subscription (subscriber.CreateWithTopic) before any relay runs, or
// the events published meanwhile are gone, deleted from the outbox and
// delivered to nobody.
//
// # Tables
//
// [New] creates six tables, named after [WithTable] (keyorder_outbox by
// default), and checks the shape of those it finds:
//
//   - keyorder_outbox: the pending events, a row each (key, seq, shard,
//     data, headers, created, sent) until a relay has published it;
//   - keyorder_outbox_keys: each key's last number, the counter row that
//     numbers its events in commit order; it stays after they are sent;
//   - keyorder_outbox_sent: the highest number a relay has sent of each
//     key, from which a relay tells an event sent before; it stays too;
//   - keyorder_outbox_meta: what every process shares: the producer ID,
//     the shard count, and the topic its relays publish to, recorded by
//     the first [Relay.Run];
//   - keyorder_outbox_leases: which relay publishes which shard, until
//     when;
//   - keyorder_outbox_relays: the relays alive, until when.
//
// On PostgreSQL it also creates keyorder_outbox_notify(), a trigger
// function, and a trigger of that name on the events table, which
// NOTIFY the channel [Outbox.Channel] at the commit of each transaction
// that adds events. Services that share a database give their outboxes
// names of their own: an outbox belongs to one service, whose relays
// publish to its one topic; a relay of another topic is refused
// ([ErrInvalidConfig]).
//
// # Order and copies
//
// [Outbox.Add] numbers each key's events 1, 2, 3... in commit order, with
// a counter row per key updated in the caller's transaction, whose lock
// orders concurrent writers of the key. The relay stamps each event with
// the outbox's producer ID, recorded in the database so that every relay
// and every restart shares it, and the event's number
// ({[Outbox.Producer], [ordering.MakeSeq](0, n)}, S12), publishes it with
// its key (P3), and deletes it once the service has taken it. A relay that
// dies between the two sends the event again, with the same stamp: a copy,
// which keyorder's subscribers ack unrun (S12), and an inbox skips across
// replicas. A failed publish leaves the key's failed tail in the outbox
// (P4), sent again from its first number.
//
// # Relays
//
// Keys are hashed into [WithShards] shards ([ordering.Partition]), and
// relays hold shards through leases in the database, renewed every third
// of [WithLease]. Each relay takes its share, the shard count divided by
// the relays alive, rounded up, and any shard nobody holds whatever the
// count says (a relay's row may be a dead one's, or forged: no row's
// expiry is taken for more than a lease from now); a relay that stops
// gives its shards up at once, and one that dies (SIGKILL) holds them
// until its lease runs out, after which the others take them over and
// send again what it had sent but not deleted. A lease is for efficiency,
// not safety: two relays on one shard cause copies, never disorder or
// loss (see the comment on leaseRound in lease.go for why).
//
// A relay reads when it is woken, and at most [WithPollInterval] after
// its last read: [Outbox.Add]
// wakes the relays of its Outbox in its process, and a [WithListener] those
// of any process, on PostgreSQL. It publishes each key's events behind
// those of the key in flight, each [publisher.WithAfter] the one before,
// so that a key's next events wait for no round trip of the database.
// Give the relay a publisher of its own, made [publisher.WithoutStamps],
// with its default batching: it sends a key once about 1 ms passes
// without a new message of it, and the relay hands a key's events over
// together.
//
// # Rows it cannot publish
//
// Every row is checked as it is read. A row that Add did not write (a
// number outside 1 to 2^32-1, or not a number; headers that do not
// decode; a number missing before it) sets aside its key from that row
// on, with a backoff, logged once per episode (keyorder/outbox: bad row)
// and counted ([Stats].Invalid); the other keys go on, and a read never
// fails whole. A row whose shard is out of range, which no relay reads,
// is given its key's shard and counted. [New] refuses a recorded shard
// count over [MaxShards], and tables of another shape.
//
// # Cost and scale
//
// An event costs the writer two statements in its transaction (the
// counter row and the event's row) and the relay a share of three
// statements per page of events (read, mark, delete, each one statement
// for all the page's keys) besides the publish: the first page of a pass
// takes up to 20 times [WithBatchSize] events, the next ones up to
// [WithBatchSize]. The counter row stays after its events are published, one
// small row per key ever written: the numbers must never start again for
// the same producer. FIGURES.md (Outbox) gives the rates measured beside
// publishing right after the commit.
//
// One relay publishes many keys at once, up to 20 pages of events in
// flight. Relays scale out up to the shard count; a key is on one relay
// at a time. Writers of one key wait for each other's commits (the
// counter row's lock); writers of different keys do not wait for each
// other on PostgreSQL, and take turns on SQLite's one write lock as every
// SQLite writer does.
//
// # Observability
//
// Metrics, through the OpenTelemetry API ([WithMeterProvider]), each with
// the attribute keyorder.producer, never a key: keyorder.outbox.published,
// keyorder.outbox.resent and keyorder.outbox.failed (counters of events),
// keyorder.outbox.invalid (rows found bad, see above),
// keyorder.outbox.pending and keyorder.outbox.lag (the events waiting in
// the relay's shards, and the oldest one's age, as of its last lease
// round), keyorder.outbox.shards; the gauges are reported while Run runs.
// [Relay.Stats] reads the same counts.
// Logs ([WithLogger]): a key's failure at Warn, once per episode, and its
// recovery at Info; a bad row at Warn, once per episode; a database error
// at Warn; shards taken over at Info.
// FIGURES.md (Outbox) lists them word for word.
package outbox

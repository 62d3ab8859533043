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
// the relays alive, rounded up; a relay that stops gives its shards up at
// once, and one that dies (SIGKILL) holds them until its lease runs out,
// after which the others take them over and send again what it had sent
// but not deleted. A lease is for efficiency, not safety: two relays on
// one shard cause copies, never disorder or loss (see the comment on
// leaseRound in lease.go for why).
//
// # Cost and scale
//
// An event costs the writer two statements in its transaction (the
// counter row and the event's row) and the relay a share of three
// statements per round of up to [WithBatchSize] events (read, mark,
// delete) besides the publish. The counter row stays after its events are
// published, one small row per key ever written: the numbers must never
// start again for the same producer.
//
// Measured (FIGURES.md, Outbox; the fake server, 2 cores): one relay
// publishes a backlog of 50 keys at about 20,000 events/s on SQLite and
// on PostgreSQL, 0.4 to 0.6 of the rate of the publisher alone
// publishing the same events; a writer's transaction with one event costs
// about 160 µs on SQLite and 240 µs on PostgreSQL, 2.8 and 1.5 times a
// plain insert of the same bytes.
//
// One relay publishes many keys at once, and one key's events in runs of
// up to a batch, one run in flight at a time (P3): one key is bound by a
// batch per publish round trip plus three statements, many keys by the
// database and the publisher. Relays scale out up to the shard count; a
// key is on one relay at a time. Writers of one key wait for each other's
// commits (the counter row's lock); writers of different keys do not wait
// for each other on PostgreSQL, and take turns on SQLite's one write lock
// as every SQLite writer does.
//
// # Observability
//
// Metrics, through the OpenTelemetry API ([WithMeterProvider]), each with
// the attribute keyorder.producer, never a key: keyorder.outbox.published,
// keyorder.outbox.resent and keyorder.outbox.failed (counters of events),
// keyorder.outbox.pending and keyorder.outbox.lag (the events waiting in
// the relay's shards, and the oldest one's age, as of its last lease
// round), keyorder.outbox.shards; the gauges are reported while Run runs.
// [Relay.Stats] reads the same counts.
// Logs ([WithLogger]): a key's failure at Warn, once per episode, and its
// recovery at Info; a database error at Warn; shards taken over at Info.
// FIGURES.md (Outbox) lists them word for word.
package outbox

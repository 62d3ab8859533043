// Package inbox applies messages exactly once, in order per key, across
// every replica of a subscriber, in the service's own SQL database: a
// message's effect and the record of its stamp (key, producer, number)
// commit in one transaction, so that after any crash the database holds
// the effect exactly when it holds the record.
//
// keyorder's subscriber skips copies it has seen itself (S6, S12); what it
// cannot see is what another replica, or this one before a restart, did.
// The inbox's table is shared by the replicas, so it sees both: a copy
// delivered to two replicas at once is applied by one and acked unapplied
// by the other, and a number missing before a message is a gap for
// certain, not a key that moved.
//
//	ib, err := inbox.New(ctx, db, inbox.PostgreSQL)
//	if err != nil {
//		return err
//	}
//	err = sub.Receive(ctx, ib.Handler(func(ctx context.Context, tx *sql.Tx, d *subscriber.Delivery) error {
//		_, err := tx.ExecContext(ctx, `UPDATE accounts SET balance = balance + $1 WHERE id = $2`, amount(d), d.Key)
//		return err
//	}))
//
// The handler is an ordinary subscriber.Handler, so the one call path
// treats it as any other: it runs on a Receive, a push endpoint and the
// release of a parked key, and its errors are retried, hold the key or
// park it (S5). See "The inbox" in the repository's DESIGN.md for the
// rules: copies, gaps and owed numbers, unstamped messages, what the
// database must provide, and how long the records last ([Inbox.Prune]).
//
// # Where a sequence starts
//
// Silence is never a start. keyorder's publisher and the outbox's relay
// number each key from 1, and a new epoch starts again at 1, so every
// sequence has a known start: a producer's first number above 1 for a
// key, with nothing of it recorded, is a gap (numbers 1 to it of its
// epoch missing), waited for and then owed, never taken for the start.
// So a lower number that comes later (a hand-over on a server that
// redelivers out of order, a first event redriven from a dead-letter
// topic) is applied, never acked as a copy.
//
// One exception is explicit: the table records when it was made (a row
// that [New] writes once, with key and producer ""), and a producer's
// first message published before that, by the service's clock, is
// adopted as its start, counted in [Stats.Adopted] and logged at Info:
// its earlier numbers were the business of whatever the service ran
// before the inbox. Without it, the first deployment of an inbox on a
// live topic would make every key wait out a gap. A delivery without a
// publish time (a handler called by hand) is never adopted.
//
// # Gaps, and which count to believe
//
// The table holds every replica's record, so the inbox's gaps are
// certain: a number it records as owed ([WithGapHandler], [Stats.Gaps],
// the keyorder.inbox.missing metric, the Warn "inbox gap recorded as
// owed") was applied by no replica when the wait ended. A subscriber's
// own sequence check sees only what passed through its process, and
// reports gaps that may be another replica's numbers; where an inbox is
// in use, its report is the authority.
//
// A gap's wait is recorded once, in the row, by whichever replica first
// finds it; every message waiting behind it, on any replica and any
// door, shares that one clock, which ends at [WithGapWait].
//
// # Stamps
//
// The inbox trusts Delivery.Producer and Delivery.Seq, as the
// subscription sets them. On a subscription that verifies signed stamps
// (subscriber.WithStampKey), a message whose stamp is not proven reaches
// the handler unstamped, so a forged stamp adds no row and makes no real
// message a copy: it is refused as unstamped ([ErrUnstamped]), or applied
// at least once with [WithUnstampedAtLeastOnce]. Refused, it holds or
// parks its key as a failure does (S5), so whoever may publish to the
// topic can still stop a key, though not make it skip: a service that
// would rather drop what is not proven acks a message whose Seq is 0 in a
// handler of its own, before the inbox's. Without keys, stamps are
// trusted as written (the repository's DESIGN.md, Security model).
//
// # The connection pool
//
// Each message costs the inbox one transaction, on a connection of the
// *sql.DB it was given, for as long as the handler runs. database/sql
// keeps 2 idle connections by default, so that with more handler calls
// at once than that, a pool left at its defaults would close a
// connection after a message and open one for the next. The inbox keeps
// instead, between messages, one connection for each call that ran at
// once, taken from the pool, and gives each back after a minute, after a
// transaction that did not end cleanly, and at [Inbox.Close]; a kept
// connection found broken is given back, and the message's transaction
// begun on another. With 4 workers on PostgreSQL and the pools at their
// defaults, commit to applied went from 1.06 to 1.03 times direct
// publishing's at the median, and from 1.28 to 1.01 at the 99th
// percentile, with the relay's own change of the same kind (FIGURES.md,
// End to end). A pool whose open connections are bounded
// (sql.DB.SetMaxOpenConns) was sized by its application, which may need
// each of them: the inbox keeps none of its connections between messages
// there, so give it as many idle ones as calls run at once
// (sql.DB.SetMaxIdleConns).
//
// The package speaks only database/sql; it imports no driver.
package inbox

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
// The package speaks only database/sql; it imports no driver.
package inbox

package inbox

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math"
	"sync/atomic"
	"time"

	"github.com/keyorder/keyorder/ordering"
	"github.com/keyorder/keyorder/subscriber"
)

// An Inbox records, in the database of a service's own state, which
// (key, producer, number) stamps have been applied, in the transaction
// that applies them. It is safe for concurrent use, and any number of
// Inboxes, in any number of processes, may share one table: each
// message's transaction locks its (key, producer) record first.
type Inbox struct {
	db  *sql.DB
	cfg config
	q   queries
	// lock is the statement of every message, prepared once: parsing it
	// cost SQLite a sixth of a message's time. A transaction uses the
	// connection's own (sql.Tx.StmtContext).
	lock *sql.Stmt
	// made is when the table was made, as its first New recorded it: a
	// producer's first message published before it is adopted (adopt).
	made   time.Time
	conns  conns
	obs    *recorder
	closed atomic.Bool
}

// An ApplyFunc applies a message's effect in tx, the transaction that
// records it. It must not commit or roll tx back: the handler refuses a
// call that did, with [ErrTxEnded]. Its error rolls the transaction
// back, and the handler returns it as it is, so that the subscription
// retries, holds or parks the message as it would any handler's error
// (S5); a subscriber.Permanent or subscriber.RetryAfter keeps its
// meaning.
type ApplyFunc func(ctx context.Context, tx *sql.Tx, d *subscriber.Delivery) error

// New returns an Inbox on db, whose dialect is d, and creates its tables
// if they are missing; several processes may do so at once. A table of
// the inbox's name that is not the inbox's own is refused with
// [ErrTableShape]; a database that does not answer as d, with
// [ErrInvalidConfig].
func New(ctx context.Context, db *sql.DB, d Dialect, opts ...Option) (*Inbox, error) {
	if db == nil {
		return nil, fmt.Errorf("%w: nil *sql.DB", ErrInvalidConfig)
	}
	if d != SQLite && d != PostgreSQL {
		return nil, fmt.Errorf("%w: %v is not SQLite or PostgreSQL", ErrInvalidConfig, d)
	}
	cfg := defaultConfig()
	for _, o := range opts {
		if err := o(&cfg); err != nil {
			return nil, err
		}
	}
	if err := checkDialect(ctx, db, d); err != nil {
		return nil, err
	}
	made, err := createTables(ctx, db, d, cfg.table)
	if err != nil {
		return nil, err
	}
	in := &Inbox{db: db, cfg: cfg, q: newQueries(d, cfg.table), made: made, conns: conns{db: db}, obs: newRecorder(cfg)}
	if in.lock, err = db.PrepareContext(ctx, in.q.lock); err != nil {
		return nil, err
	}
	return in, nil
}

// Close lets the inbox's prepared statement go, and gives the pool back
// the connections the inbox keeps between messages (see the package doc,
// The connection pool); those of calls still running go back as they
// end. The handlers it gave return [ErrClosed] from then on, without
// applying anything; a call already running commits, or fails and rolls
// back. It does not close the *sql.DB, which is the caller's, and it is
// idempotent. Close the Inbox before the *sql.DB: a connection the inbox
// keeps is closed with the pool only once given back.
func (in *Inbox) Close() error {
	if in.closed.Swap(true) {
		return nil
	}
	in.conns.close()
	return in.lock.Close()
}

// Handler returns a subscriber.Handler that applies each message once,
// whichever replica it is delivered to and however often: it runs apply
// and the record of the message's stamp in one transaction, and commits
// both or neither.
//
//   - A message whose number the store holds as applied, by this process
//     or any other sharing the table, is a copy: nothing is applied, and
//     the handler returns nil, so that it is acked (S12).
//   - A number past the next is a gap: the message waits (see
//     [WithGapWait]) for the missing numbers, then the inbox records them
//     as owed, reports the gap ([WithGapHandler]) and applies the message.
//     An owed number that comes later is applied once, never taken for a
//     copy. Every sequence starts at number 1 of its epoch, so a first
//     number above 1 is a gap too, unless it was published before the
//     inbox was made (see the package doc).
//   - A message without a key or a stamp is refused with [ErrUnstamped],
//     or applied without a record with [WithUnstampedAtLeastOnce]; one
//     whose key or producer the table cannot hold, with [ErrUnstorable].
//
// The handler is the same on every door of the subscription's one call
// path: a Receive, a push endpoint, the release of a parked key, with or
// without exactly-once delivery. On an exactly-once subscription a
// message whose ack failed after its commit comes back, and is acked as a
// copy. Handler panics, with an error wrapping [ErrInvalidConfig], if
// apply is nil: every message would fail.
func (in *Inbox) Handler(apply ApplyFunc) subscriber.Handler {
	if apply == nil {
		panic(fmt.Errorf("%w: Handler(nil): an inbox needs an ApplyFunc", ErrInvalidConfig))
	}
	return func(ctx context.Context, d *subscriber.Delivery) error {
		if in.closed.Load() {
			return fmt.Errorf("%w: message %s not applied", ErrClosed, d.ID)
		}
		if d.Key == "" || d.Seq == 0 {
			return in.unstamped(ctx, d, apply)
		}
		if d.Seq > math.MaxInt64 {
			return subscriber.Permanent(fmt.Errorf("%w: message %s, %s of %s", ErrSeqRange, d.ID, ordering.FormatSeq(d.Seq), d.Producer))
		}
		if err := storable(d); err != nil {
			return err
		}
		out, err := in.record(ctx, d, apply)
		if err != nil {
			return err
		}
		return in.report(ctx, d, out)
	}
}

// record runs d's transaction: the lock and the rule (decide), apply,
// the record. It commits whatever the rule decided, a copy or a wait
// included, so that the row's touch lasts (Prune). The deferred rollback
// covers a panic and runtime.Goexit in apply, so that no transaction is
// left open whatever it does.
func (in *Inbox) record(ctx context.Context, d *subscriber.Delivery, apply ApplyFunc) (out outcome, err error) {
	tx, end, err := in.conns.begin(ctx)
	if err != nil {
		return out, err
	}
	done := false
	defer func() {
		if !done {
			end(tx.Rollback() == nil)
		}
	}()
	now := time.Now()
	out, run, err := in.decide(ctx, tx, d, now)
	if err != nil {
		return out, err
	}
	if run {
		if err := apply(ctx, tx, d); err != nil {
			return out, txEnded(ctx, d, err)
		}
		if err := in.advance(ctx, tx, d, out, now); err != nil {
			return out, txEnded(ctx, d, err)
		}
	}
	done = true
	err = tx.Commit()
	end(err == nil)
	return out, txEnded(ctx, d, err)
}

// txEnded names the rule an apply broke when the inbox's transaction was
// over before the inbox ended it: apply committed or rolled it back. It
// is a bug in apply, which no retry mends, so it is permanent: the
// failure policy holds or parks the key (S5) rather than retrying it
// for ever. A transaction ended by ctx is ctx's error, and retried.
func txEnded(ctx context.Context, d *subscriber.Delivery, err error) error {
	if err == nil || !errors.Is(err, sql.ErrTxDone) {
		return err
	}
	if ctx.Err() != nil {
		return fmt.Errorf("keyorder/inbox: message %s: %w", d.ID, ctx.Err())
	}
	return subscriber.Permanent(fmt.Errorf("%w: message %s: %w", ErrTxEnded, d.ID, err))
}

// unstamped refuses d, or applies it without a record.
func (in *Inbox) unstamped(ctx context.Context, d *subscriber.Delivery, apply ApplyFunc) (err error) {
	if !in.cfg.unstamped {
		in.obs.refused(ctx)
		return subscriber.Permanent(fmt.Errorf("%w: message %s", ErrUnstamped, d.ID))
	}
	tx, end, err := in.conns.begin(ctx)
	if err != nil {
		return err
	}
	done := false
	defer func() {
		if !done {
			end(tx.Rollback() == nil)
		}
	}()
	if err := apply(ctx, tx, d); err != nil {
		return txEnded(ctx, d, err)
	}
	done = true
	err = tx.Commit()
	end(err == nil)
	if err != nil {
		return txEnded(ctx, d, err)
	}
	in.obs.unstampedApplied(ctx)
	return nil
}

// Prune forgets the producers whose record has been idle for longer than
// idle, and returns how many (key, producer) records it deleted. Every
// message that reads a record touches it, a copy and a wait included, so
// a record a message waits on is never idle; and Prune keeps, however
// idle, a record with numbers owed or a gap's wait open, which a late
// number still needs. What forgetting costs is at worst a counted
// re-application, never a skipped one: a forgotten producer's next number
// above 1 is a gap again (waited for, owed, reported), and a copy of one
// of its messages that comes after the prune is applied again, as owed.
// So idle must be longer than any copy can take to come: the
// subscription's message retention (7 days by default, at most 31), and
// further back than any Seek or replay reaches. keyorder's publisher
// stamps each process run as a producer of its own, so that without
// pruning the table grows by a row per key per publisher run. idle is at
// least an hour.
func (in *Inbox) Prune(ctx context.Context, idle time.Duration) (n int64, err error) {
	if idle < time.Hour {
		return 0, fmt.Errorf("%w: Prune(%v): idle is at least an hour", ErrInvalidConfig, idle)
	}
	tx, err := in.db.BeginTx(ctx, nil)
	if err != nil {
		return 0, err
	}
	defer func() {
		if err != nil {
			_ = tx.Rollback()
		}
	}()
	res, err := tx.ExecContext(ctx, in.q.prune, time.Now().Add(-idle).Unix())
	if err != nil {
		return 0, err
	}
	if n, err = res.RowsAffected(); err != nil {
		return 0, err
	}
	if _, err = tx.ExecContext(ctx, in.q.pruneOrphan); err != nil {
		return 0, err
	}
	return n, tx.Commit()
}

// Stats returns the inbox's counts since New.
func (in *Inbox) Stats() Stats { return in.obs.stats() }

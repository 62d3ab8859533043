package outbox

import (
	"context"
	"time"

	"github.com/keyorder/keyorder/ordering"
)

// renew renews the relay's row and its leases, reads back which shards
// it holds (a lease that ran out and was taken is gone), counts the
// relays alive, this one included, and forgets the rows of relays dead
// for ten leases: one transaction, so that on SQLite a renewal waits for
// the one write lock once, not at each of its statements. (In a loaded
// race build with 20 writers, a lease round of separate statements took
// up to 3.6 s, and a 5 s lease lapsed between two renewals.)
func (ru *run) renew(ctx context.Context, now time.Time) (live int, err error) {
	o, exp := ru.r.o, now.Add(ru.r.cfg.lease).UnixNano()
	tx, err := o.db.BeginTx(ctx, nil)
	if err != nil {
		return 0, err
	}
	defer func() { _ = tx.Rollback() }()
	heartbeat := o.d.Rebind(`INSERT INTO ` + o.t.relays + ` (id, expires) VALUES (?, ?)
		ON CONFLICT (id) DO UPDATE SET expires = excluded.expires`)
	if _, err := tx.ExecContext(ctx, heartbeat, ru.r.id, exp); err != nil {
		return 0, err
	}
	if _, err := tx.ExecContext(ctx, o.d.Rebind(`UPDATE `+o.t.leases+` SET expires = ? WHERE owner = ?`), exp, ru.r.id); err != nil {
		return 0, err
	}
	// No row lives longer than a lease from now: a dead relay's whose
	// clock ran ahead, or a forged one, would hold its shards, or count
	// as a relay, for as long as it says.
	for _, t := range []string{o.t.relays, o.t.leases} {
		if _, err := tx.ExecContext(ctx, o.d.Rebind(`UPDATE `+t+` SET expires = ? WHERE expires > ?`), exp, exp); err != nil {
			return 0, err
		}
	}
	shards, err := queryShards(ctx, tx, o.d.Rebind(`SELECT shard FROM `+o.t.leases+` WHERE owner = ?`), ru.r.id)
	if err != nil {
		return 0, err
	}
	if err := tx.QueryRowContext(ctx, o.d.Rebind(`SELECT COUNT(*) FROM `+o.t.relays+` WHERE expires > ?`), now.UnixNano()).Scan(&live); err != nil {
		return 0, err
	}
	forget := now.Add(-10 * ru.r.cfg.lease).UnixNano()
	if _, err := tx.ExecContext(ctx, o.d.Rebind(`DELETE FROM `+o.t.relays+` WHERE expires < ?`), forget); err != nil {
		return 0, err
	}
	if err := tx.Commit(); err != nil {
		return 0, err
	}
	held := map[int]bool{}
	for _, s := range shards {
		held[s] = true
	}
	for s := range ru.owned {
		if !held[s] {
			delete(ru.owned, s) // taken by another relay: its lease ran out
			delete(ru.fresh, s)
		}
	}
	for s := range held {
		if !ru.owned[s] {
			ru.owned[s] = true
			ru.takes++
			ru.fresh[s] = ru.takes
		}
	}
	ru.validUntil.Store(now.Add(ru.r.cfg.lease).UnixNano())
	for key := range ru.failing {
		if !ru.owned[ordering.Partition(key, o.shards)] {
			delete(ru.failing, key) // another relay's now
			delete(ru.resume, key)
			delete(ru.aside, key)
		}
	}
	return max(live, 1), nil
}

// renewer extends the run's leases every third of the lease until ctx
// ends, beside Run's loop, whose lease rounds (which take and give up
// shards, and see which were lost) wait for its reads, marks and
// publishes: in a loaded race build on SQLite a round came 2.8 s late
// behind a mark of 1 s, then waited 3.5 s for the write lock, and a 5 s
// lease lapsed. It writes only rows the relay owns (its row among the
// relays alive, its leases), and validUntil once its transaction has
// committed; the mark's fence still checks each lease in the database.
func (ru *run) renewer(ctx context.Context) {
	tick := time.NewTicker(ru.r.cfg.lease / 3)
	defer tick.Stop()
	o := ru.r.o
	heartbeat := o.d.Rebind(`INSERT INTO ` + o.t.relays + ` (id, expires) VALUES (?, ?)
		ON CONFLICT (id) DO UPDATE SET expires = excluded.expires`)
	extend := o.d.Rebind(`UPDATE ` + o.t.leases + ` SET expires = ? WHERE owner = ?`)
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		now := time.Now()
		exp := now.Add(ru.r.cfg.lease).UnixNano()
		err := func() error {
			tx, err := o.db.BeginTx(ctx, nil)
			if err != nil {
				return err
			}
			defer func() { _ = tx.Rollback() }()
			if _, err := tx.ExecContext(ctx, heartbeat, ru.r.id, exp); err != nil {
				return err
			}
			if _, err := tx.ExecContext(ctx, extend, exp, ru.r.id); err != nil {
				return err
			}
			return tx.Commit()
		}()
		if err != nil {
			if ctx.Err() == nil {
				ru.r.rec.dbFailed("renew leases", err)
			}
			continue
		}
		// Only ever later: the loop's round may have stored a later one.
		for {
			v := ru.validUntil.Load()
			if v >= exp || ru.validUntil.CompareAndSwap(v, exp) {
				break
			}
		}
	}
}

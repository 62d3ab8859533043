package outbox

import (
	"context"
	"database/sql"
	"slices"
	"time"

	"github.com/keyorder/keyorder/ordering"
)

// stmtTimeout bounds the statements a relay makes where the run's context
// no longer bounds them: deleting what was published, giving up leases.
const stmtTimeout = 10 * time.Second

// leaseRound is a relay's heartbeat, every third of the lease: it renews
// its own row among the relays alive and its leases, drops the shards it
// lost, and moves towards its share, ceil(shards / relays alive), giving
// up shards over it (those with nothing in flight) and taking free or
// expired ones under it. Then it counts the pending events of its shards.
//
// The leases are what keeps two relays off one key; they are not what
// keeps the order. A relay whose lease ran out while it was publishing
// (a pause, a partition) and the one that took the shard over both
// publish a key's events in number order, with the same stamps; on the
// topic, the first copy of each number still comes in number order (the
// earlier of two positions, each increasing with the number, increases
// with it), and a later one is a copy that subscribers ack unrun (S12).
// An event is deleted only once the service has taken it from someone.
// So an expired lease can cause copies, never disorder or loss.
func (ru *run) leaseRound(ctx context.Context) {
	now := time.Now()
	if err := ru.renew(ctx, now); err != nil {
		if ctx.Err() == nil {
			ru.r.rec.dbFailed("renew leases", err)
		}
		return
	}
	live, err := ru.live(ctx, now)
	if err != nil {
		if ctx.Err() == nil {
			ru.r.rec.dbFailed("count relays", err)
		}
		return
	}
	share := (ru.r.o.shards + live - 1) / live
	ru.shed(ctx, len(ru.owned)-share)
	if len(ru.owned) < share {
		ru.take(ctx, now, share-len(ru.owned))
	}
	ru.inList = inList(ru.owned)
	ru.count(ctx)
}

// renew renews the relay's row and its leases, and reads back which
// shards it holds: a lease that ran out and was taken is gone.
func (ru *run) renew(ctx context.Context, now time.Time) error {
	o, exp := ru.r.o, now.Add(ru.r.cfg.lease).UnixNano()
	heartbeat := o.d.q(`INSERT INTO ` + tableRelays + ` (id, expires) VALUES (?, ?)
		ON CONFLICT (id) DO UPDATE SET expires = excluded.expires`)
	if _, err := o.db.ExecContext(ctx, heartbeat, ru.r.id, exp); err != nil {
		return err
	}
	if _, err := o.db.ExecContext(ctx, o.d.q(`UPDATE `+tableLeases+` SET expires = ? WHERE owner = ?`), exp, ru.r.id); err != nil {
		return err
	}
	shards, err := ru.shards(ctx, o.d.q(`SELECT shard FROM `+tableLeases+` WHERE owner = ?`), ru.r.id)
	if err != nil {
		return err
	}
	clear(ru.owned)
	for _, s := range shards {
		ru.owned[s] = true
	}
	ru.validUntil = now.Add(ru.r.cfg.lease)
	for key := range ru.failing {
		if !ru.owned[ordering.Partition(key, o.shards)] {
			delete(ru.failing, key) // another relay's now
		}
	}
	return nil
}

// live counts the relays alive, this one included, and forgets the rows
// of relays dead for ten leases.
func (ru *run) live(ctx context.Context, now time.Time) (int, error) {
	o := ru.r.o
	var n int
	if err := o.db.QueryRowContext(ctx, o.d.q(`SELECT COUNT(*) FROM `+tableRelays+` WHERE expires > ?`), now.UnixNano()).Scan(&n); err != nil {
		return 0, err
	}
	forget := now.Add(-10 * ru.r.cfg.lease).UnixNano()
	if _, err := o.db.ExecContext(ctx, o.d.q(`DELETE FROM `+tableRelays+` WHERE expires < ?`), forget); err != nil {
		return 0, err
	}
	return max(n, 1), nil
}

// shed moves towards holding n fewer shards, for relays that have come
// to take them: it picks shards to leave, which the run reads no more
// from, and gives up those of them with nothing in flight, so that their
// next relay sends no copies. With n <= 0 it leaves nothing more.
func (ru *run) shed(ctx context.Context, n int) {
	for s := range ru.leaving {
		if !ru.owned[s] {
			delete(ru.leaving, s) // lost meanwhile
		}
	}
	for s := range ru.leaving {
		if len(ru.leaving) <= max(n, 0) {
			break
		}
		delete(ru.leaving, s) // a relay went: keep it after all
	}
	for s := range ru.owned {
		if len(ru.leaving) >= n {
			break
		}
		ru.leaving[s] = true
	}
	busy := map[int]bool{}
	for _, b := range ru.inflight {
		busy[b.shard] = true
	}
	q := ru.r.o.d.q(`DELETE FROM ` + tableLeases + ` WHERE shard = ? AND owner = ?`)
	for s := range ru.leaving {
		if busy[s] {
			continue
		}
		if _, err := ru.r.o.db.ExecContext(ctx, q, s, ru.r.id); err != nil {
			ru.r.rec.dbFailed("give up a lease", err)
			return
		}
		delete(ru.owned, s)
		delete(ru.leaving, s)
	}
}

// take takes up to n shards whose lease is free or ran out. A shard whose
// lease ran out had a relay that died or stalled: its events are sent
// from the oldest pending one, and those it had sent are sent again.
func (ru *run) take(ctx context.Context, now time.Time, n int) {
	o := ru.r.o
	held := map[int]string{}
	rs, err := o.db.QueryContext(ctx, o.d.q(`SELECT shard, owner FROM `+tableLeases+` WHERE expires >= ?`), now.UnixNano())
	if err == nil {
		err = scanLeases(rs, held)
	}
	if err != nil {
		ru.r.rec.dbFailed("read leases", err)
		return
	}
	taken := map[string][]int{} // by the relay whose lease ran out
	defer func() {
		for from, shards := range taken {
			ru.r.rec.takenOver(shards, from)
		}
	}()
	for _, s := range ru.free(held) {
		if n == 0 {
			return
		}
		from, ok, err := ru.grab(ctx, s, now)
		if err != nil {
			ru.r.rec.dbFailed("take a lease", err)
			return
		}
		if ok {
			ru.owned[s] = true
			n--
			if from != "" && from != ru.r.id {
				taken[from] = append(taken[from], s)
			}
		}
	}
}

// free returns the shards held by no live lease, from a random start, so
// that relays starting together try different ones first.
func (ru *run) free(held map[int]string) []int {
	var out []int
	start := int(time.Now().UnixNano() % int64(ru.r.o.shards))
	for i := range ru.r.o.shards {
		s := (start + i) % ru.r.o.shards
		if _, ok := held[s]; !ok {
			out = append(out, s)
		}
	}
	return out
}

// grab takes shard s if its lease is free or ran out, in one transaction,
// and returns the owner whose lease ran out ("" for a free shard).
func (ru *run) grab(ctx context.Context, s int, now time.Time) (from string, ok bool, err error) {
	o := ru.r.o
	tx, err := o.db.BeginTx(ctx, nil)
	if err != nil {
		return "", false, err
	}
	defer func() { _ = tx.Rollback() }()
	err = tx.QueryRowContext(ctx, o.d.q(`SELECT owner FROM `+tableLeases+` WHERE shard = ?`), s).Scan(&from)
	if err != nil && err != sql.ErrNoRows {
		return "", false, err
	}
	q := o.d.q(`INSERT INTO ` + tableLeases + ` (shard, owner, expires) VALUES (?, ?, ?)
		ON CONFLICT (shard) DO UPDATE SET owner = excluded.owner, expires = excluded.expires
		WHERE ` + tableLeases + `.expires < ?`)
	res, err := tx.ExecContext(ctx, q, s, ru.r.id, now.Add(ru.r.cfg.lease).UnixNano(), now.UnixNano())
	if err != nil {
		return "", false, err
	}
	if n, err := res.RowsAffected(); err != nil || n != 1 {
		return "", false, err
	}
	return from, true, tx.Commit()
}

func scanLeases(rs *sql.Rows, into map[int]string) error {
	defer rs.Close()
	for rs.Next() {
		var s int
		var owner string
		if err := rs.Scan(&s, &owner); err != nil {
			return err
		}
		into[s] = owner
	}
	return rs.Err()
}

// shards runs q, which selects shard numbers.
func (ru *run) shards(ctx context.Context, q string, args ...any) ([]int, error) {
	rs, err := ru.r.o.db.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, err
	}
	defer rs.Close()
	var out []int
	for rs.Next() {
		var s int
		if err := rs.Scan(&s); err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	slices.Sort(out)
	return out, rs.Err()
}

// count counts the pending events of the relay's shards, and the age of
// the oldest, for the metrics and Stats.
func (ru *run) count(ctx context.Context) {
	if len(ru.owned) == 0 {
		ru.r.rec.looked(0, 0, 0)
		return
	}
	var n int64
	var oldest sql.NullInt64
	q := `SELECT COUNT(*), MIN(created) FROM ` + tableEvents + ` WHERE ` + ru.inList
	if err := ru.r.o.db.QueryRowContext(ctx, q).Scan(&n, &oldest); err != nil {
		if ctx.Err() == nil {
			ru.r.rec.dbFailed("count pending events", err)
		}
		return
	}
	ru.r.rec.looked(len(ru.owned), n, oldest.Int64)
}

// giveUp gives up the run's leases and its row among the relays alive,
// so that the others take its shards at once rather than once the leases
// run out.
func (ru *run) giveUp() {
	ctx, cancel := context.WithTimeout(context.Background(), stmtTimeout)
	defer cancel()
	o := ru.r.o
	if _, err := o.db.ExecContext(ctx, o.d.q(`DELETE FROM `+tableLeases+` WHERE owner = ?`), ru.r.id); err != nil {
		ru.r.rec.dbFailed("give up leases", err)
	}
	if _, err := o.db.ExecContext(ctx, o.d.q(`DELETE FROM `+tableRelays+` WHERE id = ?`), ru.r.id); err != nil {
		ru.r.rec.dbFailed("leave the relays", err)
	}
	clear(ru.owned)
	clear(ru.leaving)
	ru.r.rec.looked(0, 0, 0)
}

package outbox

import (
	"context"
	"database/sql"
	"slices"
	"strconv"
	"strings"
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
	live, err := ru.renew(ctx, now)
	if err != nil {
		if ctx.Err() == nil {
			ru.r.rec.dbFailed("renew leases", err)
		}
		return
	}
	free, err := ru.free(ctx, now)
	if err != nil {
		if ctx.Err() == nil {
			ru.r.rec.dbFailed("read leases", err)
		}
		return
	}
	// Shards nobody holds are taken whatever the count of relays says
	// (a relay's row may be a dead one's, or forged): those free now and
	// at the last round, so that a relay coming takes them first. Shards
	// are given up only to relays that have none to take.
	share := (ru.r.o.shards + live - 1) / live
	var want []int
	for _, s := range free {
		if len(ru.owned)+len(want) < share || ru.seenFree[s] {
			want = append(want, s)
		}
	}
	clear(ru.seenFree)
	for _, s := range free {
		ru.seenFree[s] = true
	}
	over := 0
	if len(free) == 0 {
		over = len(ru.owned) - share
	}
	ru.shed(ctx, over) // with free shards, leaves none: a relay coming takes those
	ru.take(ctx, now, want)
	if ru.count(ctx) > 0 {
		ru.repair(ctx)
	}
	ru.sweep(ctx)
}

// sweep reads whole again the keys of its steady shards that hold events
// sent and not taken with no chain of the run in flight: a read of unsent
// events does not show them, and a key with no later event would leave
// them there. A run notes the keys whose runs fail (resume); this is the
// net under that note, so that no event waits longer than a lease round
// whatever path marked it.
func (ru *run) sweep(ctx context.Context) {
	var steady []int
	for s := range ru.owned {
		if !ru.leaving[s] && ru.fresh[s] == 0 {
			steady = append(steady, s)
		}
	}
	if len(steady) == 0 {
		return
	}
	o := ru.r.o
	rs, err := o.db.QueryContext(ctx, `SELECT DISTINCT e.key FROM `+o.t.events+` e LEFT JOIN `+o.t.sent+` s ON s.key = e.key
		WHERE (e.sent > 0 OR e.seq <= COALESCE(s.upto, 0)) AND `+inList(steady)+` LIMIT 1000`)
	if err != nil {
		if ctx.Err() == nil {
			ru.r.rec.dbFailed("look for events sent and not taken", err)
		}
		return
	}
	defer rs.Close()
	for rs.Next() {
		var key string
		if err := rs.Scan(&key); err != nil {
			return
		}
		if _, busy := ru.keys[key]; !busy {
			ru.resume[key] = true
		}
	}
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
		// A relay went: keep it after all. Nothing of it was read while
		// it was leaving, and a key of it may have been due then (a failed
		// run's events, marked sent): it is read whole again, as a shard
		// taken is, so that no key goes on from its unsent events only.
		delete(ru.leaving, s)
		ru.takes++
		ru.fresh[s] = ru.takes
	}
	for s := range ru.owned {
		if len(ru.leaving) >= n {
			break
		}
		ru.leaving[s] = true
	}
	busy := map[int]bool{}
	for _, c := range ru.keys {
		busy[c.shard] = true
	}
	o := ru.r.o
	q := o.d.Rebind(`DELETE FROM ` + o.t.leases + ` WHERE shard = ? AND owner = ?`)
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
		delete(ru.fresh, s)
	}
}

// free returns the shards held by no live lease, from a random start, so
// that relays starting together try different ones first.
func (ru *run) free(ctx context.Context, now time.Time) ([]int, error) {
	o := ru.r.o
	held := map[int]string{}
	rs, err := o.db.QueryContext(ctx, o.d.Rebind(`SELECT shard, owner FROM `+o.t.leases+` WHERE expires >= ?`), now.UnixNano())
	if err == nil {
		err = scanLeases(rs, held)
	}
	if err != nil {
		return nil, err
	}
	var out []int
	start := int(now.UnixNano() % int64(o.shards))
	for i := range o.shards {
		s := (start + i) % o.shards
		if _, ok := held[s]; !ok {
			out = append(out, s)
		}
	}
	return out, nil
}

// take takes the shards of want whose lease is free or ran out. A shard
// whose lease ran out had a relay that died or stalled: its events are
// sent from the oldest pending one, and those it had sent are sent again.
func (ru *run) take(ctx context.Context, now time.Time, want []int) {
	taken := map[string][]int{} // by the relay whose lease ran out
	defer func() {
		for from, shards := range taken {
			ru.r.rec.takenOver(shards, from)
		}
	}()
	for start := 0; start < len(want); start += markChunk {
		chunk := want[start:min(start+markChunk, len(want))]
		got, err := ru.grab(ctx, chunk, now)
		if err != nil {
			ru.r.rec.dbFailed("take a lease", err)
			return
		}
		for _, s := range chunk {
			from, ok := got[s]
			if !ok {
				continue
			}
			ru.owned[s] = true
			ru.takes++
			ru.fresh[s] = ru.takes
			if from != "" && from != ru.r.id {
				taken[from] = append(taken[from], s)
			}
		}
	}
}

// repair gives the rows of a shard out of range, which no relay reads,
// the shard of their key, a few keys a round, and counts them.
func (ru *run) repair(ctx context.Context) {
	o := ru.r.o
	bad := badShard(o.shards)
	rs, err := o.db.QueryContext(ctx, `SELECT DISTINCT key FROM `+o.t.events+` WHERE `+bad+` LIMIT 100`)
	var keys []string
	if err == nil {
		for rs.Next() {
			var k any
			if err = rs.Scan(&k); err != nil {
				break
			}
			keys = append(keys, text(k))
		}
		if err == nil {
			err = rs.Err()
		}
		rs.Close()
	}
	if err != nil {
		if ctx.Err() == nil {
			ru.r.rec.dbFailed("find rows of no shard", err)
		}
		return
	}
	q := o.d.Rebind(`UPDATE ` + o.t.events + ` SET shard = ? WHERE key = ? AND ` + bad)
	for _, k := range keys {
		res, err := o.db.ExecContext(ctx, q, ordering.Partition(k, o.shards), k)
		if err != nil {
			if ctx.Err() == nil {
				ru.r.rec.dbFailed("give rows their shard", err)
			}
			return
		}
		if n, err := res.RowsAffected(); err == nil && n > 0 {
			ru.r.rec.reshard(k, n)
		}
	}
}

// grab takes the shards of want whose lease is free or ran out, in one
// transaction of two statements whatever their number up to markChunk (a
// relay starting takes them all at once, and its first events wait for
// it), and returns
// those it took, each to the owner whose lease ran out ("" for a free
// shard).
func (ru *run) grab(ctx context.Context, want []int, now time.Time) (map[int]string, error) {
	o := ru.r.o
	tx, err := o.db.BeginTx(ctx, nil)
	if err != nil {
		return nil, err
	}
	defer func() { _ = tx.Rollback() }()
	was := map[int]string{}
	rs, err := tx.QueryContext(ctx, `SELECT shard, owner FROM `+o.t.leases+` WHERE `+inList(want))
	if err == nil {
		err = scanLeases(rs, was)
	}
	if err != nil {
		return nil, err
	}
	exp := now.Add(ru.r.cfg.lease).UnixNano()
	args := make([]any, 0, 3*len(want)+1)
	for _, s := range want {
		args = append(args, s, ru.r.id, exp)
	}
	args = append(args, now.UnixNano())
	q := o.d.Rebind(`INSERT INTO ` + o.t.leases + ` (shard, owner, expires) VALUES ` +
		strings.TrimSuffix(strings.Repeat("(?, ?, ?),", len(want)), ",") + `
		ON CONFLICT (shard) DO UPDATE SET owner = excluded.owner, expires = excluded.expires
		WHERE ` + o.t.leases + `.expires < ? RETURNING shard`)
	got := map[int]string{}
	shards, err := queryShards(ctx, tx, q, args...)
	if err != nil {
		return nil, err
	}
	for _, s := range shards {
		got[s] = was[s]
	}
	return got, tx.Commit()
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

// queryShards runs q on db, a *sql.DB or a *sql.Tx, and returns the shard
// numbers it selects, in order.
func queryShards(ctx context.Context, db interface {
	QueryContext(context.Context, string, ...any) (*sql.Rows, error)
}, q string, args ...any) ([]int, error) {
	rs, err := db.QueryContext(ctx, q, args...)
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
// the oldest, for the metrics and Stats, and returns the count of rows of
// no shard in range, which no relay reads: one scan of the table.
func (ru *run) count(ctx context.Context) (noShard int64) {
	var n int64
	var oldest sql.NullInt64
	o := ru.r.o
	mine := "1 = 0"
	if len(ru.owned) > 0 {
		mine = inList(ru.ownedList())
	}
	q := `SELECT COUNT(CASE WHEN ` + mine + ` THEN 1 END), MIN(CASE WHEN ` + mine + ` THEN created END),
		COUNT(CASE WHEN ` + badShard(o.shards) + ` THEN 1 END) FROM ` + o.t.events
	if err := o.db.QueryRowContext(ctx, q).Scan(&n, &oldest, &noShard); err != nil {
		if ctx.Err() == nil {
			ru.r.rec.dbFailed("count pending events", err)
		}
		return 0
	}
	ru.r.rec.looked(len(ru.owned), n, oldest.Int64)
	return noShard
}

// badShard is the condition of a row whose shard is out of range.
func badShard(shards int) string {
	return `(shard IS NULL OR NOT (shard >= 0 AND shard < ` + strconv.Itoa(shards) + `))`
}

// giveUp gives up the run's leases and its row among the relays alive,
// so that the others take its shards at once rather than once the leases
// run out.
func (ru *run) giveUp() {
	ctx, cancel := context.WithTimeout(context.Background(), stmtTimeout)
	defer cancel()
	o := ru.r.o
	if _, err := o.db.ExecContext(ctx, o.d.Rebind(`DELETE FROM `+o.t.leases+` WHERE owner = ?`), ru.r.id); err != nil {
		ru.r.rec.dbFailed("give up leases", err)
	}
	if _, err := o.db.ExecContext(ctx, o.d.Rebind(`DELETE FROM `+o.t.relays+` WHERE id = ?`), ru.r.id); err != nil {
		ru.r.rec.dbFailed("leave the relays", err)
	}
	clear(ru.owned)
	clear(ru.leaving)
	clear(ru.fresh)
	ru.r.rec.looked(0, 0, 0)
}

// ownedList returns the shards the run holds, in order.
func (ru *run) ownedList() []int {
	out := make([]int, 0, len(ru.owned))
	for s := range ru.owned {
		out = append(out, s)
	}
	slices.Sort(out)
	return out
}

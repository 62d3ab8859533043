package outbox

import (
	"context"
	"slices"
	"strconv"
	"strings"

	"github.com/keyorder/keyorder/ordering"
)

// query reads the next page of the pass, in key and number order, hands
// it to handle in runs of whole keys (scan), moves the cursor on, and
// reports whether the page was full. An error of handle's ends the read,
// and leaves the cursor where it was. Each key's events
// are a prefix of its pending ones: numbers are given in commit order
// (see [Outbox.Add]), so a snapshot that holds n holds every number below
// it.
func (ru *run) query(ctx context.Context, handle func([]row) error) (bool, error) {
	o, p := ru.r.o, ru.pass
	var steady, fresh []int
	for s := range ru.owned {
		switch {
		case ru.leaving[s]:
		case ru.fresh[s] != 0:
			if take, ok := p.fresh[s]; ok && take == ru.fresh[s] {
				fresh = append(fresh, s)
			} // else taken during the pass: read whole by the next one
		default:
			steady = append(steady, s)
		}
	}
	// In order, so that a page's statement reads the same while the run's
	// shards do, and a driver's cache of prepared statements serves it.
	slices.Sort(steady)
	slices.Sort(fresh)
	ru.keepUnread(steady, fresh)
	// With nothing of the run in flight, failing or to read again, no
	// event of a steady shard is marked sent (the invariant of run), and
	// a page of steady shards alone is read without the marks: their join
	// cost PostgreSQL 2 to 3 ms of a read of 2,000 events that took 5 to 7.
	// Were the invariant broken, events marked and not taken would be sent
	// again from there, counted as first sends. While events are in
	// flight, the join keeps a read from taking them again.
	unmarked := len(fresh) == 0 && len(p.due) == 0 && len(ru.keys) == 0 && len(ru.failing) == 0 && len(ru.resume) == 0
	var where []string
	var args []any
	if len(steady) > 0 && unmarked {
		where = append(where, "(e.sent = 0 AND "+inList(steady)+")")
	} else if len(steady) > 0 {
		where = append(where, "(e.sent = 0 AND e.seq > COALESCE(s.upto, 0) AND "+inList(steady)+")")
	}
	if len(fresh) > 0 {
		where = append(where, inList(fresh))
	}
	if len(p.due) > 0 && len(steady)+len(fresh) > 0 {
		where = append(where, "(e.key IN ("+placeholders(len(p.due))+") AND "+inList(append(steady, fresh...))+")")
		for _, k := range p.due {
			args = append(args, k)
		}
	}
	if len(where) == 0 {
		return false, nil
	}
	// An event is sent if its number is at most its key's mark, or, marked
	// by a relay from before the sent table, its own count is above 0.
	page := `SELECT e.key, e.seq, e.shard, e.data, e.headers, e.sent + CASE WHEN e.seq <= COALESCE(s.upto, 0) THEN 1 ELSE 0 END
		FROM ` + o.t.events + ` e LEFT JOIN ` + o.t.sent + ` s ON s.key = e.key WHERE (` + strings.Join(where, " OR ") + `)`
	if unmarked {
		page = `SELECT e.key, e.seq, e.shard, e.data, e.headers, e.sent FROM ` + o.t.events + ` e WHERE ` + where[0]
	}
	switch {
	case p.started && p.keyOnly:
		page += ` AND e.key > ?`
		args = append(args, p.key)
	case p.started:
		page += ` AND (e.key, e.seq) > (?, ?)`
		args = append(args, p.key, p.seq)
	}
	// The first page of a pass takes what the run has room for, so that
	// a backlog is read in one go and each key's events go out in few
	// requests; the next pages, a batch each.
	limit := ru.r.cfg.batch
	if !p.started {
		limit = max(limit, ru.r.cfg.inflight-ru.inflightRows)
	}
	page += ` ORDER BY e.key, e.seq LIMIT ?`
	args = append(args, limit)
	n, last, err := ru.scan(ctx, o.d.Rebind(page), args, func(rows []row) error {
		ru.floors(rows, steady)
		return handle(rows)
	})
	if err != nil {
		return false, err
	}
	full := n == limit
	if full {
		p.started, p.key, p.seq, p.keyOnly = true, last.key, last.seq, last.bad != ""
	}
	return full, nil
}

// floors sets the floor of the first row of each key read from a steady
// shard, with no chain in flight, not due (see row): the mark checks it.
func (ru *run) floors(rows []row, steady []int) {
	isSteady := make(map[int]bool, len(steady))
	for _, s := range steady {
		isSteady[s] = true
	}
	for i, r := range rows {
		if i > 0 && rows[i-1].key == r.key || r.bad != "" || !isSteady[r.shard] || ru.pass.isDue[r.key] {
			continue
		}
		if _, busy := ru.keys[r.key]; !busy {
			rows[i].floor = r.seq
		}
	}
}

// keepUnread keeps for a later pass the due keys whose shard, still
// held, the page about to be read leaves out (leaving, or taken during
// the pass): their events are not read with it, so the pass cannot count
// them read.
func (ru *run) keepUnread(steady, fresh []int) {
	p := ru.pass
	if len(p.due) == 0 {
		return
	}
	read := map[int]bool{}
	for _, shards := range [][]int{steady, fresh} {
		for _, s := range shards {
			read[s] = true
		}
	}
	for _, key := range p.due {
		// A shard no longer held is another relay's, which reads it whole.
		if s := ordering.Partition(key, ru.r.o.shards); ru.owned[s] && !read[s] {
			p.keep[key] = true
		}
	}
}

// inList returns the SQL condition "shard IN (...)" of shards.
func inList(shards []int) string {
	var b strings.Builder
	b.WriteString("shard IN (")
	for i, s := range shards {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.Itoa(s))
	}
	b.WriteByte(')')
	return b.String()
}

// placeholders returns n "?" separated by commas.
func placeholders(n int) string {
	return strings.TrimSuffix(strings.Repeat("?,", n), ",")
}

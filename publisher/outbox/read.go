package outbox

import (
	"context"
	"strconv"
	"strings"

	"github.com/keyorder/keyorder/ordering"
)

// query reads the next page of the pass, in key and number order, moves
// the cursor on, and reports whether the page was full. Each key's events
// are a prefix of its pending ones: numbers are given in commit order
// (see [Outbox.Add]), so a snapshot that holds n holds every number below
// it.
func (ru *run) query(ctx context.Context) ([]row, bool, error) {
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
	ru.keepUnread(steady, fresh)
	var where []string
	var args []any
	if len(steady) > 0 {
		where = append(where, "(sent = 0 AND "+inList(steady)+")")
	}
	if len(fresh) > 0 {
		where = append(where, inList(fresh))
	}
	if len(p.due) > 0 && len(steady)+len(fresh) > 0 {
		where = append(where, "(key IN ("+placeholders(len(p.due))+") AND "+inList(append(steady, fresh...))+")")
		for _, k := range p.due {
			args = append(args, k)
		}
	}
	if len(where) == 0 {
		return nil, false, nil
	}
	page := `SELECT key, seq, shard, data, headers, sent FROM ` + o.t.events + ` e WHERE (` + strings.Join(where, " OR ") + `)`
	switch {
	case p.started && p.keyOnly:
		page += ` AND key > ?`
		args = append(args, p.key)
	case p.started:
		page += ` AND (key, seq) > (?, ?)`
		args = append(args, p.key, p.seq)
	}
	// The first page of a pass takes what the run has room for, so that
	// a backlog is read in one go and each key's events go out in few
	// requests; the next pages, a batch each.
	limit := ru.r.cfg.batch
	if !p.started {
		limit = max(limit, ru.r.cfg.inflight-ru.inflightRows)
	}
	page += ` ORDER BY key, seq LIMIT ?`
	args = append(args, limit)
	// The first row of each key in the page comes with the key's lowest
	// number pending, by the primary key's index: a read of unsent events
	// only (a steady shard) does not show the events of a key sent and
	// not taken, and no run may start above them (runOfKey). One look per
	// key, not per row.
	q := `SELECT key, seq, shard, data, headers, sent, CASE WHEN rn = 1 THEN (SELECT MIN(p.seq) FROM ` + o.t.events +
		` p WHERE p.key = x.key) END FROM (SELECT key, seq, shard, data, headers, sent, ROW_NUMBER() OVER (PARTITION BY key ORDER BY seq) AS rn FROM (` +
		page + `) page) x ORDER BY key, seq`
	rows, err := ru.scan(ctx, o.d.Rebind(q), args...)
	if err != nil {
		return nil, false, err
	}
	full := len(rows) == limit
	if full {
		last := rows[len(rows)-1]
		p.started, p.key, p.seq, p.keyOnly = true, last.key, last.seq, last.bad != ""
	}
	return rows, full, nil
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

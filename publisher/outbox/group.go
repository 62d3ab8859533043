package outbox

import (
	"strconv"
	"time"

	"github.com/keyorder/keyorder/ordering"
)

// group splits rows into runs of one key to publish: the events after the
// key's chain in flight, or from its first pending one, up to the first
// bad row, which sets the key aside. It leaves out the keys waiting out a
// failure or a bad row, and the shards no longer held.
func (ru *run) group(rows []row) [][]row {
	now := time.Now()
	var out [][]row
	for i := 0; i < len(rows); {
		j := i + 1
		for j < len(rows) && rows[j].key == rows[i].key {
			j++
		}
		if g := ru.runOf(rows[i:j], now); len(g) > 0 {
			out = append(out, g)
		}
		i = j
	}
	return out
}

// runOf returns what of one key's rows to publish now. Once it leaves an
// event of a key unpublished, it publishes nothing later of the key in
// the same pass: the next pass starts from that event.
func (ru *run) runOf(rows []row, now time.Time) []row {
	key := rows[0].key
	if ru.pass.skip[key] {
		return nil
	}
	g := ru.runOfKey(rows, now)
	if len(g) < len(rows) && (len(g) == 0 || g[len(g)-1].seq != rows[len(rows)-1].seq) {
		ru.pass.skip[key] = true
	}
	return g
}

// runOfKey is runOf for a key not skipped.
func (ru *run) runOfKey(rows []row, now time.Time) []row {
	key := rows[0].key
	shard := ordering.Partition(key, ru.r.o.shards)
	if ru.resume[key] && !ru.pass.isDue[key] {
		return nil // its sent events first, in a pass where it is due
	}
	if !ru.owned[shard] || ru.leaving[shard] || now.Before(ru.failing[key].until) {
		ru.again(key)
		return nil
	}
	if a, ok := ru.aside[key]; ok && now.Before(a.until) {
		ru.again(key)
		return nil
	}
	next := int64(0) // the number the run must start with; 0: any
	c, busy := ru.keys[key]
	if busy {
		if c.failed {
			ru.again(key)
			return nil
		}
		next = c.next
	} else if a, ok := ru.aside[key]; ok && (rows[0].bad != "" || rows[0].seq >= a.next) {
		// The number after the last one published: one above it missing
		// keeps the key aside. Events below it pending were not taken (a
		// run that failed or was not sent): the key starts with them.
		next = a.next
	}
	floor := rows[0].floor // the mark's check, kept on the run's first row
	// In flight in the chain already: read again from a fresh shard or a
	// due key.
	for len(rows) > 0 && rows[0].bad == "" && next > 0 && rows[0].seq < next {
		rows = rows[1:]
	}
	if len(rows) == 0 {
		return nil
	}
	if busy && rows[0].bad == "" && rows[0].seq != next {
		// Numbers between the chain and this run are marked sent, but not
		// by this chain: read the key whole once its chain settles.
		ru.resume[key] = true
		ru.again(key)
		return nil
	}
	n := 0
	for n < len(rows) && rows[n].bad == "" && rows[n].shard == shard &&
		(n > 0 && rows[n].seq == rows[n-1].seq+1 || n == 0 && (next == 0 || rows[0].seq == next)) {
		n++
	}
	if n > 0 && floor > 0 {
		rows[0].floor = floor
	}
	if n < len(rows) {
		after := next
		if n > 0 {
			after = rows[n-1].seq + 1
		}
		ru.setAside(key, rows[n], after, now)
	} else {
		delete(ru.aside, key) // read clean again
	}
	return rows[:n]
}

// g is a run not published after all.
func (ru *run) unpublished(key string) {
	if ru.pass != nil {
		ru.pass.skip[key] = true
	}
}

// again makes key's events, sent or not, read again by a later pass,
// if the pass under way was to read them.
func (ru *run) again(key string) {
	if ru.pass != nil && ru.pass.isDue[key] {
		ru.pass.keep[key] = true
	}
}

// setAside sets key aside for its bad row r, with a backoff, logging the
// first of an episode.
func (ru *run) setAside(key string, r row, next int64, now time.Time) {
	a, was := ru.aside[key]
	a.next = next
	a.count++
	a.until = now.Add(backoff(a.count))
	ru.aside[key] = a
	if !was {
		why := r.bad
		if why == "" { // the one before it is not in the table
			why = "number " + strconv.FormatInt(max(next, r.seq-1), 10) + " is missing"
		}
		ru.r.rec.badRow(key, r.rawSeq, why)
	}
}

package outbox

import (
	"context"
	"encoding/json"
	"strconv"
	"strings"
	"time"
)

// settle counts what the service took, keeps the keys that failed back
// for a while, and has the events taken deleted (startDelete).
func (ru *run) settle(ctx context.Context, bs []*batch) {
	bs = ru.inOrder(bs)
	if len(bs) == 0 {
		return
	}
	// Counted, and logged, before the delete: whoever sees an event gone
	// sees it counted, and its key's failure or recovery logged.
	for _, b := range bs {
		ru.r.rec.settled(b.ok, len(b.results)-b.ok)
	}
	now := time.Now()
	for _, b := range bs {
		ru.inflightRows -= len(b.results)
		c := ru.keys[b.key]
		c.batches--
		ru.batches--
		f, was := ru.failing[b.key]
		switch {
		case b.err == nil && b.ok > 0 && was && !c.failed:
			delete(ru.failing, b.key)
			ru.r.rec.keyRecovered(b.key, f.count)
		case b.err != nil:
			c.failed = true
			if !was {
				ru.r.rec.keyFailed(b.key, b.first+int64(b.ok), b.err, len(b.results)-b.ok)
			}
			if !was || f.gen != b.gen { // once per chain: its later batches fail with it
				f.count++
				f.gen = b.gen
				f.until = now.Add(backoff(f.count))
				ru.failing[b.key] = f
			}
		}
		c.deletes++
	}
	if ru.batches == 0 {
		ru.burst = false
	}
	if len(ru.dels) == 0 {
		ru.delsSince = now
	}
	ru.dels = append(ru.dels, bs...)
	ru.startDelete(ctx)
}

// startDelete starts the delete of the batches settled, unless one is
// under way or it can wait (deleteDue): on PostgreSQL it runs beside Run,
// which goes on reading and publishing; on SQLite, in Run's turn.
func (ru *run) startDelete(ctx context.Context) {
	if ru.deleting != nil || len(ru.dels) == 0 || !ru.deleteDue() {
		return
	}
	ru.deleting, ru.dels = ru.dels, nil
	if ru.r.o.d == SQLite {
		// One writer at a time: a delete beside the loop's marks would
		// make each wait for the other in SQLite's busy handler, which
		// sleeps 1, 2, 5, 10... ms.
		ru.deleteDone(ctx, ru.delete(ctx, ru.deleting))
		return
	}
	ru.wg.Add(1)
	go func(bs []*batch) {
		defer ru.wg.Done()
		ru.deleted <- ru.delete(ctx, bs)
	}(ru.deleting)
}

// deleteDue reports whether the batches settled are to be deleted now.
// During a burst (see run), the publishes and the reads that feed them go
// first: a delete would take the database from them (on SQLite, Run's
// loop and the results behind it too), and what it is to delete stays
// marked sent, held by its chain, so that no read takes it meanwhile. A
// delete waits until nothing is in flight (the burst's end), until it
// would delete as many events as may be in flight, or for a poll interval
// (looked at by each settle and read), which bounds what a relay killed
// meanwhile leaves to be sent again. Out of a burst a delete waits for nothing: put off, it
// would come in the way of the next commit's read.
func (ru *run) deleteDue() bool {
	if !ru.burst || time.Since(ru.delsSince) >= ru.r.cfg.poll {
		return true
	}
	n := 0
	for _, b := range ru.dels {
		n += len(b.results)
	}
	return n >= ru.r.cfg.inflight
}

// deleteDone ends the delete under way, whose error is err, lets go of
// the chains whose batches are all settled and deleted, and starts the
// next delete.
func (ru *run) deleteDone(ctx context.Context, err error) {
	bs := ru.deleting
	ru.deleting = nil
	if err != nil {
		// The events stay, marked sent: the keys are read whole again
		// later, and the events sent again, copies, then deleted.
		for _, b := range bs {
			if b.ok > 0 {
				ru.resume[b.key] = true
			}
		}
		if ctx.Err() == nil {
			ru.r.rec.dbFailed("delete published events", err)
		}
	}
	for _, b := range bs {
		c := ru.keys[b.key]
		c.deletes--
		if c.batches == 0 && c.deletes == 0 {
			delete(ru.keys, b.key)
			if c.failed {
				ru.resume[b.key] = true // its failed tail is marked sent
			}
		}
	}
	ru.startDelete(ctx)
}

// inOrder returns the batches of bs to settle now, each chain's in their
// order, parking those whose chain has an earlier batch in flight.
func (ru *run) inOrder(bs []*batch) []*batch {
	for _, b := range bs {
		ru.keys[b.key].parked[b.first] = b
	}
	var out []*batch
	seen := map[string]bool{}
	for _, b := range bs {
		if seen[b.key] {
			continue
		}
		seen[b.key] = true
		c := ru.keys[b.key]
		for {
			next, ok := c.parked[c.settleNext]
			if !ok {
				break
			}
			delete(c.parked, c.settleNext)
			c.settleNext += int64(len(next.results))
			out = append(out, next)
		}
	}
	return out
}

// backoff is the wait before a key's next run after its n-th failed run
// in a row: 100 ms, doubling, at most 10 s.
func backoff(n int) time.Duration {
	return min(10*time.Second, 100*time.Millisecond<<min(n-1, 10))
}

// delete deletes the events the service took, in one statement per
// markChunk keys: for each key, the numbers from the first of its
// batches in bs to the last one taken, since a publish taken means every
// one before it in its chain was (WithAfter). Nothing below a chain's
// batches is deleted on their word: were a chain ever started above
// events not taken, they would be sent late, not lost. It runs beside
// Run, and reads only bs, which Run no longer writes, and the outbox.
func (ru *run) delete(ctx context.Context, bs []*batch) error {
	from, upTo := map[string]int64{}, map[string]int64{}
	for _, b := range bs {
		if b.ok > 0 {
			if f, ok := from[b.key]; !ok || b.first < f {
				from[b.key] = b.first
			}
			upTo[b.key] = max(upTo[b.key], b.first+int64(b.ok)-1)
		}
	}
	if len(upTo) == 0 {
		return nil
	}
	// What was published is deleted, even at shutdown.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), stmtTimeout)
	defer cancel()
	o := ru.r.o
	var keys []string
	var los, his []int64
	flush := func() error {
		if len(keys) == 0 {
			return nil
		}
		// A join with the keys' ranges, which finds each key's rows by
		// the primary key's index. On SQLite, key IN (...) with a CASE on
		// the key for each bound cost a look at every key per row: 53 ms
		// for 2,000 rows of 1,000 keys, against 12 ms joined.
		v, args := table(o.d, "lo, hi", keys, los, his)
		q := v + ` DELETE FROM ` + o.t.events
		if o.d == SQLite {
			q += ` WHERE rowid IN (SELECT e.rowid FROM v JOIN ` + o.t.events + ` e ON e.key = v.key AND e.seq >= v.lo AND e.seq <= v.hi)`
		} else {
			q += ` e USING v WHERE e.key = v.key AND e.seq >= v.lo AND e.seq <= v.hi`
		}
		_, err := ru.exec(ctx, o.d.Rebind(q), args...)
		keys, los, his = keys[:0], los[:0], his[:0]
		return err
	}
	for key, seq := range upTo {
		keys, los, his = append(keys, key), append(los, from[key]), append(his, seq)
		if len(keys) == markChunk {
			if err := flush(); err != nil {
				return err
			}
		}
	}
	return flush()
}

// table returns a WITH clause naming v the table (key, cols...) of
// len(keys) rows, key TEXT from keys and each of cols BIGINT from one of
// nums, and the clause's arguments. A join with it finds each key's rows
// by the primary key's index.
//
// On SQLite it is a VALUES list, an argument a cell. On PostgreSQL it is
// one argument, the rows in JSON: the statement's text is then the same
// whatever its count of rows, so that a driver's cache of prepared
// statements serves it, and it binds one argument, not one a cell. In a
// log of the relay's statements (PostgreSQL, 6 rounds of 2,000 events, no
// latency), as VALUES lists the mark and the deletes were parsed again at
// most counts of keys, and their parse and bind cost 3.5 ms a round over
// 50 keys and 9.8 ms over 1,000; in JSON, 1.4 and 2.0 ms.
func table(d Dialect, cols string, keys []string, nums ...[]int64) (string, []any) {
	names := strings.Split(cols, ", ")
	if d == PostgreSQL {
		var b strings.Builder
		b.WriteByte('[')
		for i, k := range keys {
			if i > 0 {
				b.WriteByte(',')
			}
			b.WriteString(`{"key":`)
			q, _ := json.Marshal(k) // a string always marshals
			b.Write(q)
			for j, n := range nums {
				b.WriteString(`,"` + names[j] + `":`)
				b.WriteString(strconv.FormatInt(n[i], 10))
			}
			b.WriteByte('}')
		}
		b.WriteByte(']')
		return "WITH v AS (SELECT * FROM json_to_recordset(CAST(? AS JSON)) AS r (key TEXT, " +
			strings.Join(names, " BIGINT, ") + " BIGINT))", []any{b.String()}
	}
	row := "(CAST(? AS TEXT)" + strings.Repeat(", CAST(? AS BIGINT)", len(nums)) + "),"
	args := make([]any, 0, len(keys)*(1+len(nums)))
	for i, k := range keys {
		args = append(args, k)
		for _, n := range nums {
			args = append(args, n[i])
		}
	}
	return "WITH v (key, " + cols + ") AS (VALUES " + strings.TrimSuffix(strings.Repeat(row, len(keys)), ",") + ")", args
}

// drain waits up to the drain timeout for the batches in flight and the
// deletes of what they published, and gives up the run's leases.
func (ru *run) drain() {
	ctx, cancel := context.WithTimeout(context.Background(), ru.r.cfg.drain)
	defer cancel()
	for ru.inflightRows > 0 || ru.deleting != nil {
		select {
		case b := <-ru.done:
			ru.settle(ctx, ru.collect(nil, b))
		case err := <-ru.deleted:
			ru.deleteDone(ctx, err)
		case <-ctx.Done():
			ru.giveUp()
			return
		}
	}
	ru.giveUp()
}

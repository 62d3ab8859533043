package outbox

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/keyorder/keyorder/ordering"
	"github.com/keyorder/keyorder/publisher"
)

// A run is one [Relay.Run]'s state. Its fields are the Run goroutine's
// alone, except done, on which each waiter sends its batch, and wg, which
// counts the waiters.
//
// What the run reads rests on one invariant: in a shard the run has held
// since its last complete pass, an event marked sent (sent > 0) is in
// flight, or belongs to a key in failing or resume. So a pass reads the
// unsent events of those shards only, and every event of the shards
// taken since (fresh) and of the keys due again (resume).
type run struct {
	r *Relay

	owned      map[int]bool // shards this run holds
	leaving    map[int]bool // shards of owned to give up once nothing of theirs is in flight
	fresh      map[int]int  // shards of owned taken since the last complete pass, to the take's number
	takes      int          // numbers the takes
	validUntil time.Time    // when the leases of owned run out, unless renewed
	seenFree   map[int]bool // shards the last lease round found free

	pass *pass // the pass under way, nil between passes

	keys         map[string]*chain  // keys with events in flight
	inflightRows int                // events in flight, over keys
	failing      map[string]failure // keys whose last run failed, until one succeeds
	resume       map[string]bool    // keys whose sent events are to be read again
	aside        map[string]failure // keys set aside for a bad row
	gen          int                // numbers the chains
	closed       bool               // the publisher is closed: Run returns ErrClosed

	done        chan *batch // from waiters, to Run; unbuffered
	waitCtx     context.Context
	stopWaiting context.CancelFunc // ends the waiters' waits at the end of Run
	wg          sync.WaitGroup
}

// A pass reads the run's shards from the first key to the last, a page
// at a time; it pauses while the run has no room, and the next read goes
// on from its cursor.
type pass struct {
	fresh map[int]int     // the shards read whole, and their takes, as they were at the start
	due   []string        // the keys read whole: resume's, out of their backoff
	isDue map[string]bool // due's
	keep  map[string]bool // keys of due to read whole again all the same
	// skip holds the keys of which the pass left an event unpublished:
	// nothing later of theirs is published in this pass.
	skip    map[string]bool
	key     string // the cursor: the pass goes on after (key, seq)...
	seq     int64
	keyOnly bool // ...or after every row of key
	started bool // the cursor is set
}

// A chain is a key's events in flight: each published WithAfter the one
// before, so that the key's next events go behind them at once, and a
// failure fails everything after it (P4).
type chain struct {
	shard   int
	next    int64             // the number after the last one published
	last    *publisher.Result // the last one's Result
	batches int               // batches of the chain not settled
	failed  bool              // one of them failed: publish nothing more
	gen     int
	// settleNext is the first number of the chain's earliest batch not
	// settled; a batch whose waiter was quicker waits in parked, so that
	// the chain's batches are settled in their order.
	settleNext int64
	parked     map[int64]*batch
}

// A batch is a run of a key's events handed to the publisher together,
// with consecutive numbers.
type batch struct {
	key     string
	shard   int
	first   int64 // the first event's number
	gen     int   // the chain's
	results []*publisher.Result
	// Set by the batch's waiter before it sends the batch on done.
	ok  int   // how many, from the first, the service took
	err error // the first failure, nil if every event was taken
}

// A failure is a key's episode of failed runs, or of bad rows.
type failure struct {
	count int       // failures in a row
	until time.Time // the key is not sent again before
	gen   int       // the chain whose failure was counted last
	next  int64     // set aside: the number the key's next run starts with; 0 for any
}

func newRun(r *Relay) *run {
	ru := &run{
		r: r, owned: map[int]bool{}, leaving: map[int]bool{}, fresh: map[int]int{}, seenFree: map[int]bool{},
		keys: map[string]*chain{}, failing: map[string]failure{}, resume: map[string]bool{}, aside: map[string]failure{},
		done: make(chan *batch),
	}
	ru.waitCtx, ru.stopWaiting = context.WithCancel(context.Background())
	return ru
}

// room reports whether the run may read another page of events.
func (ru *run) room() bool { return ru.inflightRows < ru.r.cfg.inflight }

// read reads and publishes, page after page, until the pass is complete
// or the run has no room. It reports whether it published anything.
func (ru *run) read(ctx context.Context) bool {
	published := false
	for !ru.closed && len(ru.owned) > 0 && ru.room() && time.Now().Before(ru.validUntil) && ctx.Err() == nil {
		if ru.pass == nil {
			ru.pass = ru.newPass()
		}
		rows, full, err := ru.query(ctx)
		if err != nil {
			if ctx.Err() == nil {
				ru.r.rec.dbFailed("read events", err)
			}
			return published
		}
		groups := ru.group(rows)
		if len(groups) > 0 {
			if groups, err = ru.mark(ctx, groups); err != nil {
				for _, g := range groups {
					ru.resume[g[0].key] = true // marked, maybe, and not sent
					ru.unpublished(g[0].key)
				}
				if ctx.Err() == nil {
					ru.r.rec.dbFailed("mark events sent", err)
				}
				return published
			}
		}
		for _, g := range groups {
			ru.publish(ctx, g)
			published = true
		}
		if !full {
			ru.endPass()
			return published
		}
	}
	return published
}

// newPass starts a pass: the fresh shards and the keys due are read whole.
func (ru *run) newPass() *pass {
	p := &pass{fresh: map[int]int{}, isDue: map[string]bool{}, keep: map[string]bool{}, skip: map[string]bool{}}
	for s, take := range ru.fresh {
		if ru.owned[s] && !ru.leaving[s] {
			p.fresh[s] = take
		}
	}
	now := time.Now()
	for key := range ru.resume {
		if _, busy := ru.keys[key]; !busy && !now.Before(ru.failing[key].until) {
			p.due = append(p.due, key)
			p.isDue[key] = true
		}
	}
	return p
}

// endPass ends a complete pass: what it read whole is read.
func (ru *run) endPass() {
	for s, take := range ru.pass.fresh {
		if t, ok := ru.fresh[s]; ok && t == take {
			delete(ru.fresh, s)
		}
	}
	for _, key := range ru.pass.due {
		if !ru.pass.keep[key] {
			delete(ru.resume, key)
		}
	}
	ru.pass = nil
}

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
	} else {
		if a, ok := ru.aside[key]; ok {
			next = a.next // the number after the last one published
		}
		if r := rows[0]; r.bad == "" && r.first > 0 && r.first < r.seq {
			// Events of the key below the read ones are pending, sent and
			// not taken, in flight with no chain of this run: a run that
			// failed, or one of a relay that had the shard. They go first:
			// the key is read whole, by a pass where it is due.
			ru.resume[key] = true
			ru.again(key)
			return nil
		}
	}
	// In flight already: read again from a fresh shard or a due key.
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

// markChunk is the most keys one statement marks or deletes, which keeps
// its arguments under both databases' bounds.
const markChunk = 500

// mark counts a send of every event of groups before they are sent, in
// one statement per markChunk runs, and returns the groups to send: an
// event whose count is above 0 when it is read again was sent before, and
// its next send is counted as a re-send. It is also the fence of a lease:
// an event is marked only while the relay's lease of its shard is live in
// the database, so a relay that stalled past its lease sends nothing that
// its successor may have read unmarked. A chunk that marks fewer events
// than it names is sent none of; its keys are read whole again later.
// On an error, it returns groups as they were.
func (ru *run) mark(ctx context.Context, groups [][]row) ([][]row, error) {
	o := ru.r.o
	out := make([][]row, 0, len(groups))
	for start := 0; start < len(groups); start += markChunk {
		chunk := groups[start:min(start+markChunk, len(groups))]
		args := make([]any, 0, 3*len(chunk)+2)
		rows := 0
		for _, g := range chunk {
			args = append(args, g[0].key, g[0].seq, g[len(g)-1].seq)
			rows += len(g)
		}
		q := ranges(len(chunk)) + ` UPDATE ` + o.t.events + ` SET sent = sent + 1 FROM v WHERE ` + o.t.events + `.key = v.key
			AND ` + o.t.events + `.seq >= v.lo AND ` + o.t.events + `.seq <= v.hi
			AND ` + o.t.events + `.shard IN (SELECT shard FROM ` + o.t.leases + ` WHERE owner = ? AND expires > ?)`
		args = append(args, ru.r.id, time.Now().UnixNano())
		res, err := o.db.ExecContext(ctx, o.d.Rebind(q), args...)
		if err != nil {
			return groups, err
		}
		n, err := res.RowsAffected()
		if err != nil {
			return groups, err
		}
		if n == int64(rows) {
			out = append(out, chunk...)
			continue
		}
		for _, g := range chunk {
			if n > 0 {
				ru.resume[g[0].key] = true // marked, maybe, and not sent
				ru.again(g[0].key)
			}
			ru.unpublished(g[0].key)
		}
	}
	return out, nil
}

// publish publishes one key's run, stamped, behind the key's chain in
// flight, and starts its waiter.
func (ru *run) publish(ctx context.Context, g []row) {
	key := g[0].key
	c := ru.keys[key]
	if c == nil {
		ru.gen++
		c = &chain{shard: g[0].shard, gen: ru.gen, settleNext: g[0].seq, parked: map[int64]*batch{}}
		ru.keys[key] = c
	}
	b := &batch{key: key, shard: c.shard, first: g[0].seq, gen: c.gen, results: make([]*publisher.Result, 0, len(g))}
	producer, again, signer := ru.r.o.producer, 0, ru.r.cfg.stampKeys
	for _, e := range g {
		if e.sent > 0 { // as read, before this send's mark
			again++
		}
		st := ordering.Stamp{Producer: producer, Seq: ordering.MakeSeq(0, uint32(e.seq))}
		st.Put(e.headers)
		if signer != nil {
			signer.Sign(e.headers, key, st, e.data)
		}
		// Each event goes WithAfter the one before, in this run or the
		// chain's: if one fails, none after it is sent, even once its
		// failure has been reported and the key resumed (P5).
		res := ru.r.pub.Publish(ctx, &publisher.Message{Data: e.data, Headers: e.headers},
			publisher.WithOrderingKey(key), publisher.WithAfter(c.last))
		c.last = res
		b.results = append(b.results, res)
		if closedNow(res) {
			ru.closed = true
			break
		}
	}
	c.next = g[len(b.results)-1].seq + 1
	c.batches++
	ru.r.rec.sent(again)
	ru.inflightRows += len(b.results)
	ru.wg.Add(1)
	go ru.wait(b)
}

// closedNow reports whether res was refused because the publisher is
// closed.
func closedNow(res *publisher.Result) bool {
	select {
	case <-res.Ready():
		_, err := res.Get(context.Background())
		return errors.Is(err, publisher.ErrClosed)
	default:
		return false
	}
}

// wait waits for b's results, in order, and hands b back to Run. It is
// the one goroutine per batch in flight; Run waits for it.
func (ru *run) wait(b *batch) {
	defer ru.wg.Done()
	for i, res := range b.results {
		if _, err := res.Get(ru.waitCtx); err != nil {
			if ru.waitCtx.Err() != nil {
				return // Run has returned without this batch
			}
			b.err = err
			break
		}
		b.ok = i + 1
	}
	select {
	case ru.done <- b:
	case <-ru.waitCtx.Done():
	}
}

// collect appends b, and every other batch whose waiter is done now, to
// out.
func (ru *run) collect(out []*batch, b *batch) []*batch {
	out = append(out, b)
	for {
		select {
		case b := <-ru.done:
			out = append(out, b)
		default:
			return out
		}
	}
}

// settle deletes the events the service took, and keeps the keys that
// failed back for a while.
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
		if c.batches == 0 {
			delete(ru.keys, b.key)
			if c.failed {
				ru.resume[b.key] = true // its failed tail is marked sent
			}
		}
	}
	if err := ru.delete(ctx, bs); err != nil {
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
// events not taken, they would be sent late, not lost.
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
	var keys, lo, hi []any
	flush := func() error {
		if len(keys) == 0 {
			return nil
		}
		var q string
		var args []any
		if o.d == PostgreSQL {
			// A join: the CASE below costs a look at every key per row.
			q = ranges(len(keys)) + ` DELETE FROM ` + o.t.events + ` USING v WHERE ` + o.t.events + `.key = v.key AND ` +
				o.t.events + `.seq >= v.lo AND ` + o.t.events + `.seq <= v.hi`
			for i := range keys {
				args = append(args, keys[i], lo[2*i+1], hi[2*i+1])
			}
		} else {
			q = `DELETE FROM ` + o.t.events + ` WHERE key IN (` + placeholders(len(keys)) + `) AND seq >= ` + perKey(len(keys)) +
				` AND seq <= ` + perKey(len(keys))
			args = append(append(keys, lo...), hi...)
		}
		_, err := o.db.ExecContext(ctx, o.d.Rebind(q), args...)
		keys, lo, hi = keys[:0], lo[:0], hi[:0]
		return err
	}
	for key, seq := range upTo {
		keys = append(keys, key)
		lo = append(lo, key, from[key])
		hi = append(hi, key, seq)
		if len(keys) == markChunk {
			if err := flush(); err != nil {
				return err
			}
		}
	}
	return flush()
}

// drain waits up to the drain timeout for the batches in flight, deletes
// what they published, and gives up the run's leases.
func (ru *run) drain() {
	ctx, cancel := context.WithTimeout(context.Background(), ru.r.cfg.drain)
	defer cancel()
	for ru.inflightRows > 0 {
		select {
		case b := <-ru.done:
			ru.settle(ctx, ru.collect(nil, b))
		case <-ctx.Done():
			ru.giveUp()
			return
		}
	}
	ru.giveUp()
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

// perKey returns a CASE on key of n keys, each with a number, as one
// statement's arguments give them: key IN (...) finds the rows by the
// primary key's index, and the CASE bounds each key's numbers, in one
// statement whatever the number of keys.
func perKey(n int) string {
	return "CASE key" + strings.Repeat(" WHEN ? THEN CAST(? AS BIGINT)", n) + " END"
}

// ranges returns a WITH clause naming v the table (key, lo, hi) of n
// rows, as one statement's arguments give them, three a row: a join with
// it finds each key's rows by the primary key's index and bounds its
// numbers.
func ranges(n int) string {
	return "WITH v (key, lo, hi) AS (VALUES " +
		strings.TrimSuffix(strings.Repeat("(CAST(? AS TEXT), CAST(? AS BIGINT), CAST(? AS BIGINT)),", n), ",") + ")"
}

// placeholders returns n "?" separated by commas.
func placeholders(n int) string {
	return strings.TrimSuffix(strings.Repeat("?,", n), ",")
}

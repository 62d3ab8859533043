package outbox

import (
	"context"
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
type run struct {
	r *Relay

	owned      map[int]bool // shards this run holds
	leaving    map[int]bool // shards of owned to give up once nothing of theirs is in flight
	validUntil time.Time    // when the leases of owned run out, unless renewed
	inList     string       // "shard IN (...)" of owned, made when owned changes
	cursor     string       // the read resumes after this key; "" from the first

	inflight     map[string]*batch  // key to its run of events in flight
	inflightRows int                // events in flight, over inflight
	failing      map[string]failure // keys whose last run failed, until one succeeds

	done        chan *batch // from waiters, to Run; unbuffered
	waitCtx     context.Context
	stopWaiting context.CancelFunc // ends the waiters' waits at the end of Run
	wg          sync.WaitGroup
}

// A batch is one key's run of events in flight: consecutive numbers from
// the key's oldest pending one.
type batch struct {
	key     string
	shard   int
	first   int64 // the first event's number
	results []*publisher.Result
	// Set by the batch's waiter before it sends the batch on done.
	ok  int   // how many, from the first, the service took
	err error // the first failure, nil if every event was taken
}

// A failure is a key's episode of failed runs.
type failure struct {
	count int       // failed runs in a row
	until time.Time // the key is not sent again before
}

func newRun(r *Relay) *run {
	ru := &run{
		r: r, owned: map[int]bool{}, leaving: map[int]bool{}, inflight: map[string]*batch{}, failing: map[string]failure{},
		done: make(chan *batch),
	}
	ru.waitCtx, ru.stopWaiting = context.WithCancel(context.Background())
	return ru
}

// room reports whether the run may read another batch of events.
func (ru *run) room() bool { return ru.inflightRows+ru.r.cfg.batch <= 4*ru.r.cfg.batch }

// row is a pending event as the read query returns it.
type row struct {
	key     string
	seq     int64
	shard   int
	data    []byte
	headers string
	sent    int
}

// read reads the next events of the run's shards and publishes them,
// batch after batch while there is room and a full batch came back.
func (ru *run) read(ctx context.Context) {
	for ru.readOnce(ctx) && ru.cursor != "" {
	}
}

// readOnce reads one batch of events and publishes them. It reports
// whether it published anything.
func (ru *run) readOnce(ctx context.Context) bool {
	if len(ru.owned) == 0 || !ru.room() || time.Now().After(ru.validUntil) {
		return false
	}
	rows, err := ru.query(ctx)
	if err != nil {
		if ctx.Err() == nil {
			ru.r.rec.dbFailed("read events", err)
		}
		return false
	}
	groups := ru.group(rows)
	if len(groups) == 0 {
		return false
	}
	groups, err = ru.mark(ctx, groups)
	if err != nil {
		if ctx.Err() == nil {
			ru.r.rec.dbFailed("mark events sent", err)
		}
		return false
	}
	for _, g := range groups {
		ru.publish(ctx, g)
	}
	return len(groups) > 0
}

// query reads up to a batch of pending events after the cursor, in key
// and number order, and moves the cursor on. Each key's events are a
// prefix of its pending ones: numbers are given in commit order (see
// [Outbox.Add]), so a snapshot that holds n holds every number below it.
func (ru *run) query(ctx context.Context) ([]row, error) {
	q := ru.r.o.d.q(`SELECT key, seq, shard, data, headers, sent FROM ` + tableEvents +
		` WHERE key > ? AND ` + ru.inList + ` ORDER BY key, seq LIMIT ?`)
	rs, err := ru.r.o.db.QueryContext(ctx, q, ru.cursor, ru.r.cfg.batch)
	if err != nil {
		return nil, err
	}
	defer rs.Close()
	var out []row
	for rs.Next() {
		var e row
		if err := rs.Scan(&e.key, &e.seq, &e.shard, &e.data, &e.headers, &e.sent); err != nil {
			return nil, err
		}
		out = append(out, e)
	}
	if err := rs.Err(); err != nil {
		return nil, err
	}
	ru.cursor = ""
	if len(out) == ru.r.cfg.batch {
		ru.cursor = out[len(out)-1].key
	}
	return out, nil
}

// group splits rows into runs of one key, leaving out the keys in flight
// or waiting out a failure, and the shards no longer held.
func (ru *run) group(rows []row) [][]row {
	now := time.Now()
	var out [][]row
	for i := 0; i < len(rows); {
		j := i + 1
		for j < len(rows) && rows[j].key == rows[i].key {
			j++
		}
		key := rows[i].key
		_, busy := ru.inflight[key]
		held := ru.owned[rows[i].shard] && !ru.leaving[rows[i].shard]
		if !busy && held && !now.Before(ru.failing[key].until) {
			out = append(out, rows[i:j])
		}
		i = j
	}
	return out
}

// mark counts a send of every event of groups, in one transaction, before
// they are sent, and returns the groups to send: an event whose count is
// above 0 when it is read again was sent before, and its next send is
// counted as a re-send. It is also the fence of a lease: a group is marked
// only while the relay's lease of its shard is live in the database, so a
// relay that stalled past its lease sends nothing that its successor may
// have read unmarked.
func (ru *run) mark(ctx context.Context, groups [][]row) ([][]row, error) {
	tx, err := ru.r.o.db.BeginTx(ctx, nil)
	if err != nil {
		return nil, err
	}
	defer func() { _ = tx.Rollback() }()
	q := ru.r.o.d.q(`UPDATE ` + tableEvents + ` SET sent = sent + 1 WHERE key = ? AND seq >= ? AND seq <= ?
		AND EXISTS (SELECT 1 FROM ` + tableLeases + ` WHERE shard = ? AND owner = ? AND expires > ?)`)
	now := time.Now().UnixNano()
	out := groups[:0]
	for _, g := range groups {
		res, err := tx.ExecContext(ctx, q, g[0].key, g[0].seq, g[len(g)-1].seq, g[0].shard, ru.r.id, now)
		if err != nil {
			return nil, err
		}
		if n, err := res.RowsAffected(); err != nil {
			return nil, err
		} else if n == int64(len(g)) {
			out = append(out, g)
		}
	}
	return out, tx.Commit()
}

// publish publishes one key's run, stamped, and starts its waiter.
func (ru *run) publish(ctx context.Context, g []row) {
	b := &batch{key: g[0].key, shard: g[0].shard, first: g[0].seq, results: make([]*publisher.Result, 0, len(g))}
	producer, again := ru.r.o.producer, 0
	for _, e := range g {
		h, err := decodeHeaders(e.headers)
		if err != nil {
			// Add wrote the headers; a row that does not decode was
			// changed by hand, and its key waits here until it is fixed.
			ru.r.rec.dbFailed("decode headers of "+strconv.Quote(e.key)+" "+strconv.FormatInt(e.seq, 10), err)
			break
		}
		if e.sent > 0 {
			again++
		}
		ordering.Stamp{Producer: producer, Seq: ordering.MakeSeq(0, uint32(e.seq))}.Put(h)
		// Each event after the run's first goes WithAfter the one before:
		// if one fails, none after it is sent, even once its failure has
		// been reported and the key resumed (P5).
		var prev *publisher.Result
		if n := len(b.results); n > 0 {
			prev = b.results[n-1]
		}
		b.results = append(b.results, ru.r.pub.Publish(ctx, &publisher.Message{Data: e.data, Headers: h},
			publisher.WithOrderingKey(e.key), publisher.WithAfter(prev)))
	}
	if len(b.results) == 0 {
		return
	}
	ru.r.rec.sent(again)
	ru.inflight[b.key] = b
	ru.inflightRows += len(b.results)
	ru.wg.Add(1)
	go ru.wait(b)
}

// wait waits for b's results, in order, and hands b back to Run. It is
// the one goroutine per run of events in flight; Run waits for it.
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

// settle deletes the events the service took, in one transaction, and
// keeps the keys that failed back for a while.
func (ru *run) settle(ctx context.Context, bs []*batch) {
	// Counted before the delete: whoever sees an event gone sees it
	// counted.
	for _, b := range bs {
		ru.r.rec.settled(b.ok, len(b.results)-b.ok)
	}
	if err := ru.delete(ctx, bs); err != nil && ctx.Err() == nil {
		// The events stay, and are sent again: copies.
		ru.r.rec.dbFailed("delete published events", err)
	}
	now := time.Now()
	for _, b := range bs {
		delete(ru.inflight, b.key)
		ru.inflightRows -= len(b.results)
		f, was := ru.failing[b.key]
		switch {
		case b.err == nil && was:
			delete(ru.failing, b.key)
			ru.r.rec.keyRecovered(b.key, f.count)
		case b.err != nil:
			if !was {
				ru.r.rec.keyFailed(b.key, b.first+int64(b.ok), b.err, len(b.results)-b.ok)
			}
			f.count++
			f.until = now.Add(backoff(f.count))
			ru.failing[b.key] = f
		}
	}
}

// backoff is the wait before a key's next run after its n-th failed run
// in a row: 100 ms, doubling, at most 10 s.
func backoff(n int) time.Duration {
	return min(10*time.Second, 100*time.Millisecond<<min(n-1, 10))
}

// delete deletes, per batch, the events the service took.
func (ru *run) delete(ctx context.Context, bs []*batch) error {
	// What was published is deleted, even at shutdown.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), stmtTimeout)
	defer cancel()
	tx, err := ru.r.o.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback() }()
	q := ru.r.o.d.q(`DELETE FROM ` + tableEvents + ` WHERE key = ? AND seq <= ?`)
	for _, b := range bs {
		if b.ok == 0 {
			continue
		}
		if _, err := tx.ExecContext(ctx, q, b.key, b.first+int64(b.ok)-1); err != nil {
			return err
		}
	}
	return tx.Commit()
}

// drain waits up to the drain timeout for the batches in flight, deletes
// what they published, and gives up the run's leases.
func (ru *run) drain() {
	ctx, cancel := context.WithTimeout(context.Background(), ru.r.cfg.drain)
	defer cancel()
	for len(ru.inflight) > 0 {
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
func inList(shards map[int]bool) string {
	var b strings.Builder
	b.WriteString("shard IN (")
	first := true
	for s := range shards {
		if !first {
			b.WriteByte(',')
		}
		first = false
		b.WriteString(strconv.Itoa(s))
	}
	b.WriteByte(')')
	return b.String()
}

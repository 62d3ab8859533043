package outbox

import (
	"context"
	"errors"
	"time"

	"github.com/keyorder/keyorder/ordering"
	"github.com/keyorder/keyorder/publisher"
)

// markChunk is the most keys one statement deletes, or shards one grab
// takes, which keeps its arguments under SQLite's bound, and each
// statement short.
const markChunk = 500

// markStep is the most keys one statement marks: a page's runs are
// marked and published markStep keys at a time, so that the first go out
// while the next are marked. The mark, an upsert a key, runs 6 to 12 µs a
// key on PostgreSQL: over 1,000 keys in steps of 500 the first events
// waited 9 to 10 ms for it.
const markStep = 125

// mark records that every event of groups, at most markStep runs, is
// sent, before they are: a key's row in the sent table is raised to the
// last number of its run, in one statement, and mark returns the runs
// marked. An event at or below its key's mark when read again was sent
// before (runs start at the key's lowest pending number or go on from the
// run before, so every event below a run's is sent or gone), and its next
// send is counted as a re-send. A row a key, where a count in each
// event's row cost PostgreSQL and SQLite about 2 µs an event.
//
// The same statement checks, for a run whose first row has a floor (see
// row), that nothing of its key is pending below it, by the primary key's
// index: a look-up of its own cost a statement a page. And it is the
// fence of a lease: a key is marked only while the relay's lease of its
// shard is live in the database, so a relay that stalled past its lease
// sends nothing that its successor may have read unmarked. A run not
// marked, for either reason, is not sent: its key is read whole again by
// a later pass.
func (ru *run) mark(ctx context.Context, groups [][]row) ([][]row, error) {
	o := ru.r.o
	keys := make([]string, len(groups))
	shards, his, los := make([]int64, len(groups)), make([]int64, len(groups)), make([]int64, len(groups))
	for i, g := range groups {
		keys[i], shards[i], his[i], los[i] = g[0].key, int64(g[0].shard), g[len(g)-1].seq, g[0].floor
	}
	v, args := table(o.d, "shard, hi, lo", keys, shards, his, los)
	q := v + `
		INSERT INTO ` + o.t.sent + ` (key, upto) SELECT key, hi FROM v
		WHERE shard IN (SELECT shard FROM ` + o.t.leases + ` WHERE owner = ? AND expires > ?)
			AND (lo = 0 OR NOT EXISTS (SELECT 1 FROM ` + o.t.events + ` p WHERE p.key = v.key AND p.seq < v.lo))
		ON CONFLICT (key) DO UPDATE SET upto = CASE WHEN excluded.upto > ` + o.t.sent + `.upto
			THEN excluded.upto ELSE ` + o.t.sent + `.upto END
		RETURNING key`
	args = append(args, ru.r.id, time.Now().UnixNano())
	marked := make(map[string]bool, len(groups))
	err := ru.markWrite(ctx, func(c querier) error {
		clear(marked)
		rs, err := c.QueryContext(ctx, o.d.Rebind(q), args...)
		if err != nil {
			return err
		}
		defer rs.Close()
		for rs.Next() {
			var key string
			if err := rs.Scan(&key); err != nil {
				return err
			}
			marked[key] = true
		}
		return rs.Err()
	})
	if err != nil {
		return nil, err
	}
	out := make([][]row, 0, len(groups))
	for _, g := range groups {
		key := g[0].key
		if marked[key] {
			out = append(out, g)
			continue
		}
		// Events of the key are pending below the run, sent and not
		// taken, with no chain of this run: a run that failed, or one of
		// a relay that had the shard; they go first. Or the lease is
		// gone, and a key of a shard no longer held drops out of resume
		// at the pass's end.
		ru.resume[key] = true
		ru.again(key)
		ru.unpublished(key)
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
	}
	// Once closed, the publisher refuses every Publish at once: the run's
	// last event tells. A look at each event cost each a channel, made by
	// Ready for a Result still pending (10,000 a round of 10,000 events).
	if closedNow(c.last) {
		ru.closed = true
	}
	c.next = g[len(g)-1].seq + 1
	c.batches++
	ru.batches++
	ru.r.rec.sent(again)
	ru.inflightRows += len(b.results)
	if ru.inflightRows >= ru.r.cfg.batch {
		ru.burst = true
	}
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

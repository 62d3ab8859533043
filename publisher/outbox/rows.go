package outbox

import (
	"context"
	"database/sql"
	"fmt"
	"math"
	"slices"
	"strconv"
	"sync"
	"unicode/utf8"

	"github.com/keyorder/keyorder/ordering"
)

// A row is a pending event as a read returns it, checked: Add wrote every
// row, but a table may hold what a hand or a bug wrote since.
type row struct {
	key     string
	seq     int64  // the event's number, 1 to 2^32-1
	rawSeq  string // seq as the table holds it, for the logs
	shard   int
	data    []byte
	headers map[string]string // with room for the stamp
	sent    int64             // sends counted, this one's mark included once marked
	// floor is set on the first row of a key read from a steady shard,
	// with no chain in flight, not due: such a read shows unsent events
	// only, and no run may start above events of the key sent and not
	// taken, so the mark sends the key's run only if nothing of the key is
	// pending below floor, the row's own number. 0 elsewhere: a key read
	// whole starts at its lowest number pending, and one with a chain goes
	// on from it.
	floor int64
	bad   string // why the row cannot be published; "" if it can
}

// scan runs q, which selects key, seq, shard, data, headers and sent in
// key and number order, and hands its rows, each checked, to handle, in
// runs of whole keys and in order: a row the outbox cannot publish comes
// with bad set, and never fails the read. It returns how many rows q
// gave, and the last one; or the first error, of the read or of handle,
// after which it hands nothing more.
//
// On SQLite, on a pool with no bound on its connections, the rows of a
// page past its first streamAfter are scanned on a goroutine (stream),
// and handle is given what is scanned each time it is ready for more, so
// that the first keys are marked and published while the rest are still
// read: SQLite gives rows as it walks the primary key's index, about 5 µs
// a row through modernc.org/sqlite, and a backlog of 10,000 events took
// as long to read as to publish.
// PostgreSQL sorts the page before its first row, and gives the rest at
// about 1 µs a row: there each statement more that handle ran cost more
// than the overlap saved (2,000 events over 50 keys, relay ÷ direct 0.63
// in one go, 0.53 streamed; measured again with the set-based marks, no
// gain with 50 keys and a loss with 1,000: FIGURES.md, stop 49).
// Elsewhere, and on a bounded pool, which its application sized
// (handle's statements take connections of their own), handle is given
// every row at the end.
func (ru *run) scan(ctx context.Context, q string, args []any, handle func([]row) error) (int, row, error) {
	o := ru.r.o
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	rs, err := ru.queryPage(ctx, q, args)
	if err != nil {
		return 0, row{}, err
	}
	// A page of a few rows is scanned here, whole, as every page is
	// where it is not streamed: a goroutine and the connections of
	// handle's statements beside the read's would cost a small page more
	// than they save (commit to applied's p99 on SQLite 1.07 → 1.22 times
	// direct's, streaming every page).
	limit := -1
	if o.d == SQLite && o.db.Stats().MaxOpenConnections == 0 {
		limit = streamAfter
	}
	head, more, err := scanUpTo(o, rs, limit)
	if more {
		return stream(cancel, o, rs, head, handle)
	}
	rs.Close()
	if err != nil || len(head) == 0 {
		return 0, row{}, err
	}
	return len(head), head[len(head)-1], handle(head)
}

// maxPages bounds the page statements a run keeps prepared (queryPage).
// A run's pages read alike while its shards do: a first page and the
// next, marked or not, with keys due or not, a few texts in all.
const maxPages = 16

// queryPage runs the page statement q. On SQLite it runs q prepared, once
// per text and connection for the run's life: modernc.org/sqlite parses
// a statement's text every time it runs, which was a third of an idle
// relay's CPU time. Past maxPages texts (its shards changed), it closes
// them all and begins again. On PostgreSQL, pgx's stdlib caches prepared
// statements by their text already.
func (ru *run) queryPage(ctx context.Context, q string, args []any) (*sql.Rows, error) {
	o := ru.r.o
	if o.d != SQLite {
		return o.db.QueryContext(ctx, q, args...)
	}
	st := ru.pages[q]
	if st == nil {
		if len(ru.pages) >= maxPages {
			ru.closePages()
		}
		var err error
		if st, err = o.db.PrepareContext(ctx, q); err != nil {
			return nil, err
		}
		if ru.pages == nil {
			ru.pages = map[string]*sql.Stmt{}
		}
		ru.pages[q] = st
	}
	return st.QueryContext(ctx, args...)
}

// closePages closes the page statements queryPage prepared; database/sql
// closes each once the rows still read from it are.
func (ru *run) closePages() {
	for q, st := range ru.pages {
		_ = st.Close()
		delete(ru.pages, q)
	}
}

// stream goes on with scan's rows rs, of which head are scanned, on a
// goroutine of its own, and hands them to handle in runs of whole keys,
// each time handle is ready for more. It ends rs, and waits for its
// goroutine, before it returns; cancel cancels rs's context.
func stream(cancel context.CancelFunc, o *Outbox, rs *sql.Rows, head []row, handle func([]row) error) (int, row, error) {
	var (
		mu      sync.Mutex
		scanned = head // scanned and not yet handed over
		n       = len(head)
		last    = head[len(head)-1]
		end     bool  // the scan is over...
		readErr error // ...with this error
	)
	more := make(chan struct{}, 1) // a row or the end came since the last take
	more <- struct{}{}
	exited := make(chan struct{})
	go func() {
		defer close(exited)
		defer rs.Close()
		poke := func() {
			select {
			case more <- struct{}{}:
			default:
			}
		}
		var err error
		for rs.Next() {
			var r row
			if r, err = scanRow(o, rs); err != nil {
				break
			}
			mu.Lock()
			scanned = append(scanned, r)
			n++
			last = r
			mu.Unlock()
			poke()
		}
		if err == nil {
			err = rs.Err()
		}
		mu.Lock()
		end, readErr = true, err
		mu.Unlock()
		poke()
	}()
	// take returns the rows of whole keys scanned: all of them once the
	// scan is over, else those before the last key, which may have more.
	take := func() (rows []row, over bool, err error) {
		mu.Lock()
		defer mu.Unlock()
		cut := len(scanned)
		if !end {
			for cut > 0 && scanned[cut-1].key == scanned[len(scanned)-1].key {
				cut--
			}
		}
		rows = scanned[:cut:cut]
		scanned = slices.Clone(scanned[cut:])
		return rows, end && len(scanned) == 0, readErr
	}
	for {
		<-more
		rows, over, err := take()
		if err != nil {
			<-exited
			return 0, row{}, err // before handing over the rows, as if none were read
		}
		if len(rows) > 0 {
			if err := handle(rows); err != nil {
				cancel()
				<-exited
				return 0, row{}, err
			}
		}
		if over {
			<-exited
			return n, last, nil
		}
	}
}

// scanUpTo scans rs's rows, each checked, up to limit of them (all if
// limit < 0), and reports whether rs may have more: never after an
// error, which the caller ends rs on.
func scanUpTo(o *Outbox, rs *sql.Rows, limit int) (rows []row, more bool, err error) {
	for limit < 0 || len(rows) < limit {
		if !rs.Next() {
			return rows, false, rs.Err()
		}
		r, err := scanRow(o, rs)
		if err != nil {
			return nil, false, err
		}
		rows = append(rows, r)
	}
	return rows, true, nil
}

// streamAfter is how many rows of a page scan reads before it hands the
// rest of the scan to a goroutine (SQLite).
const streamAfter = 256

// scanRow scans and checks the row rs is at.
func scanRow(o *Outbox, rs *sql.Rows) (row, error) {
	var key, seq, shard, data, headers, sent any
	if err := rs.Scan(&key, &seq, &shard, &data, &headers, &sent); err != nil {
		return row{}, err
	}
	return o.check(key, seq, shard, data, headers, sent), nil
}

// check turns a row's columns, as the driver gave them, into a row.
func (o *Outbox) check(key, seq, shard, data, headers, sent any) row {
	var r row
	r.key = text(key)
	r.rawSeq = fmt.Sprint(seq)
	if b, ok := seq.([]byte); ok {
		r.rawSeq = strconv.Quote(string(b))
	} else if s, ok := seq.(string); ok {
		r.rawSeq = strconv.Quote(s)
	}
	switch n, ok := seq.(int64); {
	case !ok:
		r.bad = "seq is not an integer"
	case n < 1 || n > math.MaxUint32:
		r.bad = "seq is outside 1 to 4294967295"
	default:
		r.seq = n
	}
	if s, ok := shard.(int64); ok && s >= 0 && s < int64(o.shards) {
		r.shard = int(s)
	} else {
		r.shard = -1
		r.bad = "shard is not an integer in range"
	}
	switch d := data.(type) {
	case []byte:
		r.data = d
	case string:
		r.data = []byte(d)
	case nil:
	default:
		r.bad = "data is not bytes"
	}
	h, err := decodeHeaders(text(headers))
	if err != nil {
		r.bad = "headers do not decode: " + err.Error()
	}
	r.headers = h
	r.sent = 1 // unknown: take it for sent
	if n, ok := sent.(int64); ok {
		r.sent = n
	}
	switch {
	case r.bad != "":
	case !utf8.ValidString(r.key) || r.key == "":
		r.bad = "key is empty or not UTF-8"
	case r.shard != ordering.Partition(r.key, o.shards):
		r.bad = "shard " + strconv.Itoa(r.shard) + " is not the key's"
	}
	return r
}

// text returns a TEXT column's value as a string.
func text(v any) string {
	switch v := v.(type) {
	case string:
		return v
	case []byte:
		return string(v)
	case nil:
		return ""
	}
	return fmt.Sprint(v)
}

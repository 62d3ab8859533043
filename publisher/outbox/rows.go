package outbox

import (
	"context"
	"fmt"
	"math"
	"strconv"
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
	// first is the lowest number of the key pending when the row was read,
	// read or not (a run must not start above it), on the key's first row
	// of a page, where firsts looked it up; 0 on the others, and if
	// unknown.
	first int64
	bad   string // why the row cannot be published; "" if it can
}

// scan runs q, which selects key, seq, shard, data, headers and sent, and
// returns its rows, each checked: a row the outbox cannot publish comes
// back with bad set, and never fails the read.
func (ru *run) scan(ctx context.Context, q string, args ...any) ([]row, error) {
	rs, err := ru.r.o.db.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, err
	}
	defer rs.Close()
	var out []row
	for rs.Next() {
		var key, seq, shard, data, headers, sent any
		if err := rs.Scan(&key, &seq, &shard, &data, &headers, &sent); err != nil {
			return nil, err
		}
		out = append(out, ru.r.o.check(key, seq, shard, data, headers, sent))
	}
	return out, rs.Err()
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

package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/keyorder/keyorder/ordering"
	"github.com/keyorder/keyorder/ordering/orderingtest"
	"github.com/keyorder/keyorder/publisher/outbox"
	"github.com/keyorder/keyorder/subscriber/inbox"
)

// diagnose prints, for a story that did not finish, where each account's
// missing events are: still in the outbox, stored by the server, or
// behind what the inbox recorded; then the server's count of the
// subscription's deliveries. It reads with a context of its own, since
// the story's has usually ended.
func diagnose(cfg config, srv *orderingtest.Server, topic, subName string, out io.Writer) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	fmt.Fprintf(out, "diagnosis: server: %+v\n", srv.Stats(subName))
	rep, err := read(ctx, cfg)
	if err != nil {
		fmt.Fprintf(out, "diagnosis: reading the databases: %v\n", err)
		return
	}
	stored := map[string][]int64{} // per key, the numbers stored, in publish order
	number := map[string]int64{}   // message ID to number
	for _, m := range srv.Messages(topic) {
		if st, err := ordering.ParseStamp(m.Attributes); err == nil && !st.IsZero() && !isForged(m) {
			_, n := ordering.SplitSeq(st.Seq)
			stored[m.OrderingKey] = append(stored[m.OrderingKey], int64(n))
			number[m.ID] = int64(n)
		}
	}
	delivered := map[string][]int64{} // per key, the numbers delivered, in delivery order
	for _, d := range srv.Deliveries(subName) {
		if n, ok := number[d.MessageID]; ok {
			delivered[d.OrderingKey] = append(delivered[d.OrderingKey], n)
		}
	}
	keys := make([]string, 0, len(rep.versions))
	for key := range rep.versions {
		keys = append(keys, key)
	}
	slices.Sort(keys)
	for _, key := range keys {
		last, applied := rep.versions[key], rep.journal[key]
		if int64(len(applied)) == last {
			continue
		}
		fmt.Fprintf(out, "diagnosis: %s: %d of %d versions applied: %s\n  stored: %s\n  delivered: %s\n",
			key, len(applied), last, runs(applied), runs(stored[key]), runs(delivered[key]))
	}
	for _, q := range []struct{ db, query string }{
		{cfg.source, "SELECT key, MIN(seq), MAX(seq), COUNT(*), MIN(shard) FROM " + outbox.DefaultTable + " GROUP BY key ORDER BY key"},
		{cfg.source, "SELECT key, upto FROM " + outbox.DefaultTable + "_sent ORDER BY key"},
		{cfg.source, "SELECT owner, COUNT(*), MIN(shard), MAX(shard), MAX(expires) FROM " + outbox.DefaultTable + "_leases GROUP BY owner"},
		{cfg.source, "SELECT id, expires FROM " + outbox.DefaultTable + "_relays"},
		{cfg.sink, "SELECT key, producer, last_seq, prev_seq, wait_seq, wait_since FROM " + inbox.DefaultTable + " ORDER BY key"},
		{cfg.sink, "SELECT key, producer, lo, hi FROM " + inbox.DefaultTable + "_owed ORDER BY key"},
	} {
		if err := dump(ctx, q.db, q.query, out); err != nil {
			fmt.Fprintf(out, "diagnosis: %s: %v\n", q.query, err)
		}
	}
}

// runs writes s, in its order, as runs of consecutive numbers: "1-3 7 5-6".
func runs(s []int64) string {
	var b strings.Builder
	for i := 0; i < len(s); {
		j := i
		for j+1 < len(s) && s[j+1] == s[j]+1 {
			j++
		}
		if b.Len() > 0 {
			b.WriteByte(' ')
		}
		if j == i {
			fmt.Fprintf(&b, "%d", s[i])
		} else {
			fmt.Fprintf(&b, "%d-%d", s[i], s[j])
		}
		i = j + 1
	}
	return b.String()
}

// dump prints the rows query returns, a line each.
func dump(ctx context.Context, dsn, query string, out io.Writer) error {
	st, err := openStore(dsn)
	if err != nil {
		return err
	}
	defer st.Close()
	rows, err := st.db.QueryContext(ctx, query)
	if err != nil {
		return err
	}
	cols, err := rows.Columns()
	if err != nil {
		return errors.Join(err, rows.Close())
	}
	fmt.Fprintf(out, "diagnosis: %s\n", query)
	for rows.Next() {
		vals := make([]any, len(cols))
		ptrs := make([]any, len(cols))
		for i := range vals {
			ptrs[i] = &vals[i]
		}
		if err := rows.Scan(ptrs...); err != nil {
			return errors.Join(err, rows.Close())
		}
		fmt.Fprintf(out, "diagnosis:   %v\n", vals)
	}
	return errors.Join(rows.Err(), rows.Close())
}

package inbox_test

import (
	"context"
	"database/sql"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/keyorder/keyorder/ordering"
	"github.com/keyorder/keyorder/subscriber"
	"github.com/keyorder/keyorder/subscriber/inbox"
)

// BenchmarkInbox is the inbox's cost per message: its handler against a
// handler that writes the same row, the message's effect, in a
// transaction of its own, without the inbox's record. Each message is
// the next number of its key; "serial" runs one call at a time over 64
// keys, "parallel" one key per goroutine (GOMAXPROCS of them). Run in
// rounds of -count=1 (make bench BENCH=BenchmarkInbox), so that the sides
// alternate and share the machine's drift.
func BenchmarkInbox(b *testing.B) {
	for _, db := range databases {
		b.Run(db.name, func(b *testing.B) {
			for _, side := range []string{"inbox", "plain"} {
				b.Run(side+"/serial", func(b *testing.B) { benchSerial(b, db, side) })
				b.Run(side+"/parallel", func(b *testing.B) { benchParallel(b, db, side) })
			}
		})
	}
}

// benchHandler returns the side's handler on a fresh database.
func benchHandler(b *testing.B, db database, side string) subscriber.Handler {
	one, _ := db.open(b)
	one.SetMaxIdleConns(64)
	ib := newInbox(b, one, db.dialect)
	if side == "inbox" {
		return ib.Handler(record(db.dialect))
	}
	apply := record(db.dialect)
	return func(ctx context.Context, d *subscriber.Delivery) error { return plain(ctx, one, d, apply) }
}

// plain applies d in a transaction of its own, with no record.
func plain(ctx context.Context, db *sql.DB, d *subscriber.Delivery, apply inbox.ApplyFunc) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	if err := apply(ctx, tx, d); err != nil {
		_ = tx.Rollback()
		return err
	}
	return tx.Commit()
}

func benchSerial(b *testing.B, db database, side string) {
	h := benchHandler(b, db, side)
	ctx := context.Background()
	const keys = 64
	d := &subscriber.Delivery{Producer: "bench"}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		d.Key = fmt.Sprintf("key-%d", i%keys)
		d.Seq = ordering.MakeSeq(0, uint32(i/keys+1))
		d.ID = fmt.Sprint(i)
		if err := h(ctx, d); err != nil {
			b.Fatal(err)
		}
	}
}

func benchParallel(b *testing.B, db database, side string) {
	h := benchHandler(b, db, side)
	ctx := context.Background()
	var workers atomic.Int64
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		d := &subscriber.Delivery{Producer: "bench", Key: fmt.Sprintf("key-%d", workers.Add(1))}
		for n := uint32(1); pb.Next(); n++ {
			d.Seq = ordering.MakeSeq(0, n)
			d.ID = fmt.Sprint(n)
			if err := h(ctx, d); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

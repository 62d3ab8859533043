package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"path/filepath"
	"testing"
	"time"

	"cloud.google.com/go/pubsub/v2"

	"github.com/keyorder/keyorder/dbtest/pgtest"
	"github.com/keyorder/keyorder/internal/harness"
	"github.com/keyorder/keyorder/ordering/orderingtest"
	"github.com/keyorder/keyorder/publisher"
	"github.com/keyorder/keyorder/publisher/outbox"
	"github.com/keyorder/keyorder/subscriber"
	"github.com/keyorder/keyorder/subscriber/inbox"
)

// BenchmarkCommitToApplied measures the time from a change's commit to
// its effect's commit on the receiving side, on SQLite and PostgreSQL,
// with the fake
// answering each Publish 25 ms later, side by side:
//
//   - direct: the writer publishes the event through keyorder's
//     publisher right after its commit (what a service without an outbox
//     does, losing the event if it dies in between), and the receiver
//     writes the same rows in a transaction of its own, without an inbox;
//   - outbox: the event goes through outbox.Add, a Relay, and
//     inbox.Handler.
//
// Each op is one round of 200 changes over 20 accounts, one every 2 ms.
// It reports the median and the 99th percentile over every event of the
// run, in ms.
func BenchmarkCommitToApplied(b *testing.B) {
	for _, db := range []string{"sqlite", "postgres"} {
		for _, side := range []string{"direct", "outbox"} {
			b.Run(db+"/"+side, func(b *testing.B) {
				var all []time.Duration
				for range b.N {
					all = append(all, latencyRound(b, benchStores(b, db), side == "outbox")...)
				}
				p50, p99 := percentiles(all)
				b.ReportMetric(float64(p50.Microseconds())/1000, "p50-ms")
				b.ReportMetric(float64(p99.Microseconds())/1000, "p99-ms")
				b.ReportMetric(0, "ns/op")
			})
		}
	}
}

// benchStores returns the DSNs of a round's two databases.
func benchStores(b *testing.B, db string) config {
	if db == "postgres" {
		return config{source: "postgres:" + pgtest.DSN(b), sink: "postgres:" + pgtest.DSN(b)}
	}
	dir := b.TempDir()
	return config{source: filepath.Join(dir, "w.db"), sink: filepath.Join(dir, "r.db")}
}

const (
	benchEvents   = 200
	benchAccounts = 20
)

// latencyRound runs one round and returns each event's commit-to-applied
// time.
func latencyRound(b *testing.B, cfg config, viaOutbox bool) []time.Duration {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	srv, err := orderingtest.New(orderingtest.WithLatency(25 * time.Millisecond))
	must(b, err)
	defer srv.Close()
	client, err := harness.ConnectProject(ctx, srv.Addr, harness.ExampleProject())
	must(b, err)
	defer client.Close()
	sub, err := subscriber.CreateWithTopic(ctx, client, topicID, subID, subscriber.WithWorkers(4))
	must(b, err)
	must(b, prepareStores(ctx, cfg))
	source, err := openStore(cfg.source)
	must(b, err)
	defer source.Close()
	sink, err := openStore(cfg.sink)
	must(b, err)
	defer sink.Close()

	rctx, stop := context.WithCancel(ctx)
	received := make(chan error, 1)
	go func() { received <- receiveBench(rctx, sub, sink, viaOutbox) }()
	var send func(key string, amount int64) error
	if viaOutbox {
		send = outboxSender(ctx, rctx, b, client, source)
	} else {
		send = directSender(ctx, b, client, source)
	}
	tick := time.NewTicker(2 * time.Millisecond)
	for i := range benchEvents {
		<-tick.C
		must(b, send(account(i%benchAccounts+1), int64(i+1)))
	}
	tick.Stop()
	for {
		if n, err := sink.applied(ctx); err == nil && n >= benchEvents {
			break
		}
		select {
		case <-ctx.Done():
			b.Fatal("not every event applied")
		case <-time.After(5 * time.Millisecond):
		}
	}
	stop()
	must(b, <-received)
	rep := report{journal: map[string][]int64{}, balances: map[string][2]int64{}}
	must(b, readSink(ctx, cfg, &rep))
	return rep.latency
}

// outboxSender writes each change with its event through the outbox, and
// runs a relay until rctx ends.
func outboxSender(ctx, rctx context.Context, b *testing.B, client *pubsub.Client, source *store) func(string, int64) error {
	ob, err := outbox.New(ctx, source.db, source.outboxDialect())
	must(b, err)
	pub, err := publisher.New(client, topicID, relayPublisherOptions()...)
	must(b, err)
	r, err := outbox.NewRelay(ob, pub)
	must(b, err)
	done := make(chan struct{})
	go func() { defer close(done); _ = r.Run(rctx) }()
	b.Cleanup(func() { <-done; _ = pub.Close(context.Background()) })
	return func(key string, amount int64) error { return change(ctx, source, ob, key, amount) }
}

// directSender writes each change, then publishes its event.
func directSender(ctx context.Context, b *testing.B, client *pubsub.Client, source *store) func(string, int64) error {
	pub, err := publisher.New(client, topicID)
	must(b, err)
	b.Cleanup(func() { _ = pub.Close(context.Background()) })
	return func(key string, amount int64) error {
		tx, err := source.db.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		var version int64
		err = tx.QueryRowContext(ctx, source.q(`INSERT INTO accounts (key, version, balance) VALUES (?, 1, ?)
			ON CONFLICT (key) DO UPDATE SET version = accounts.version + 1, balance = accounts.balance + excluded.balance
			RETURNING version`), key, amount).Scan(&version)
		if err != nil {
			_ = tx.Rollback()
			return err
		}
		data, _ := json.Marshal(event{Version: version, Amount: amount, Committed: time.Now().UnixNano()})
		if err := tx.Commit(); err != nil {
			return err
		}
		pub.Publish(ctx, &publisher.Message{Data: data}, publisher.WithOrderingKey(key))
		return nil
	}
}

// receiveBench applies the events until ctx ends: through the inbox, or
// in a transaction of the handler's own.
func receiveBench(ctx context.Context, sub *subscriber.Subscription, sink *store, viaInbox bool) error {
	h := func(ctx context.Context, d *subscriber.Delivery) error {
		tx, err := sink.db.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		if err := apply(ctx, sink, tx, d, "bench"); err != nil {
			_ = tx.Rollback()
			return err
		}
		return tx.Commit()
	}
	if viaInbox {
		in, err := inbox.New(ctx, sink.db, sink.inboxDialect())
		if err != nil {
			return err
		}
		h = in.Handler(func(ctx context.Context, tx *sql.Tx, d *subscriber.Delivery) error {
			return apply(ctx, sink, tx, d, "bench")
		})
	}
	err := sub.Receive(ctx, h)
	if ctx.Err() != nil {
		return nil
	}
	return err
}

func must(b *testing.B, err error) {
	b.Helper()
	if err != nil {
		b.Fatal(err)
	}
}

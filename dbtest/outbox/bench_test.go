package outbox_test

import (
	"bytes"
	"context"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"cloud.google.com/go/pubsub/v2"
	"github.com/stretchr/testify/require"

	"github.com/keyorder/keyorder/dbtest/pgtest"
	"github.com/keyorder/keyorder/ordering"
	"github.com/keyorder/keyorder/ordering/orderingtest"
	"github.com/keyorder/keyorder/publisher"
	"github.com/keyorder/keyorder/publisher/outbox"
)

// BenchmarkRelayThroughput measures a relay's throughput, in events per
// second from the commit of a backlog to its last event taken by the
// service, beside direct publishing: the official client, ordering on,
// publishing the same events (same keys, same data) and waiting for their
// results, as a service that publishes right after its commit would, on
// the same fake server, in alternating rounds of one run. Each iteration
// is one round of each; the metrics are the medians over the rounds, and
// the median of the rounds' ratios. relay-cpu-ms and direct-cpu-ms are
// the CPU time of a round, this process's and the PostgreSQL server's
// (the relay's until its deletes are done): with no latency, both sides
// keep the two cores of the machines this runs on busy, and relay ÷
// direct follows the ratio of their CPU times.
//
// A third side, bare, is what any relay must at least do: one statement
// reads the committed backlog from a table of its own, and keyorder's
// publisher publishes each event, stamped, by its key, with no mark, no
// delete and no lease. bare ÷ direct bounds relay ÷ direct from above on
// the machine it runs on, and relay ÷ bare is what the relay's own work
// (marks, deletes, leases, order under failure) costs.
func BenchmarkRelayThroughput(b *testing.B) {
	for _, lat := range []time.Duration{0, 25 * time.Millisecond} {
		for _, shape := range [][2]int{{2000, 50}, {2000, 1000}, {10_000, 50}} {
			for _, k := range kinds {
				name := fmt.Sprintf("%s/%dx%d/latency=%v", k.name, shape[0], shape[1], lat)
				b.Run(name, func(b *testing.B) { benchRelay(b, k, lat, shape[0], shape[1]) })
			}
		}
	}
}

const benchKeys = 50

func benchRelay(b *testing.B, k dbKind, lat time.Duration, events, keys int) {
	ctx := context.Background()
	dsn := k.dsn(b)
	db := k.openDSN(b, dsn)
	ob, err := outbox.New(ctx, db, k.dialect)
	require.NoError(b, err)
	e := newEnv(b, orderingtest.WithLatency(lat))
	r, err := outbox.NewRelay(ob, e.publisher(b), relayOptions(k, dsn)...)
	require.NoError(b, err)
	runRelay(b, r)
	direct := e.client.Publisher(e.topic)
	direct.EnableMessageOrdering = true
	b.Cleanup(direct.Stop)
	msgs := make([]*publisher.Message, events)
	for i := range msgs {
		msgs[i] = &publisher.Message{Data: fmt.Appendf(nil, "event %d, some bytes of payload to carry", i)}
	}
	key := func(i int) string { return fmt.Sprintf("key-%d", i%keys) }

	counter := k.openDSN(b, dsn)               // a pool of its own, which leaves the relay's as it was
	var relayCPU, directCPU, bareCPU []float64 // CPU time of a round, this process's and the database server's, in ms
	cpuSince := func(from cpuMark, into *[]float64) {
		*into = append(*into, float64(from.since(b))/float64(time.Millisecond))
	}
	relayRound := func() time.Duration {
		target := r.Stats().Published + int64(events)
		tx, err := db.BeginTx(ctx, nil)
		require.NoError(b, err)
		for i, m := range msgs {
			require.NoError(b, ob.Add(ctx, tx, key(i), m))
		}
		require.NoError(b, tx.Commit())
		start, cpu := time.Now(), cpuNow(b)
		for r.Stats().Published < target {
			time.Sleep(200 * time.Microsecond) // a measurement's resolution, not a synchronisation
		}
		d := time.Since(start)
		// The deletes of what the service took go on after the round:
		// they are the relay's work too, and must not fall into direct's
		// next round.
		for pending(b, counter) > 0 {
			time.Sleep(time.Millisecond) // a measurement's resolution, not a synchronisation
		}
		cpuSince(cpu, &relayCPU)
		return d
	}
	directRound := func() time.Duration {
		start, cpu := time.Now(), cpuNow(b)
		defer cpuSince(cpu, &directCPU)
		rs := make([]*pubsub.PublishResult, len(msgs))
		for i, m := range msgs {
			rs[i] = direct.Publish(ctx, &pubsub.Message{Data: m.Data, OrderingKey: key(i)})
		}
		for _, res := range rs {
			_, err := res.Get(ctx)
			require.NoError(b, err)
		}
		return time.Since(start)
	}
	bare := bareSide(b, k, db, e.publisher(b), keys)
	bareRound := func() time.Duration {
		bare.add(msgs)
		start, cpu := time.Now(), cpuNow(b)
		bare.publish()
		d := time.Since(start)
		cpuSince(cpu, &bareCPU)
		bare.clear()
		return d
	}
	var relayRate, directRate, bareRate, ratio, bareRatio, relayBare []float64
	b.ResetTimer()
	for i := range b.N {
		var dr, dd, dbr time.Duration
		if i%2 == 0 {
			dr, dd, dbr = relayRound(), directRound(), bareRound()
		} else {
			dbr, dd, dr = bareRound(), directRound(), relayRound()
		}
		relayRate = append(relayRate, float64(events)/dr.Seconds())
		directRate = append(directRate, float64(events)/dd.Seconds())
		bareRate = append(bareRate, float64(events)/dbr.Seconds())
		ratio = append(ratio, dd.Seconds()/dr.Seconds())
		bareRatio = append(bareRatio, dd.Seconds()/dbr.Seconds())
		relayBare = append(relayBare, dbr.Seconds()/dr.Seconds())
	}
	b.StopTimer()
	b.ReportMetric(median(relayRate), "relay-ev/s")
	b.ReportMetric(median(directRate), "direct-ev/s")
	b.ReportMetric(median(bareRate), "bare-ev/s")
	b.ReportMetric(median(ratio), "relay/direct")
	b.ReportMetric(median(bareRatio), "bare/direct")
	b.ReportMetric(median(relayBare), "relay/bare")
	b.ReportMetric(median(relayCPU), "relay-cpu-ms")
	b.ReportMetric(median(directCPU), "direct-cpu-ms")
	b.ReportMetric(median(bareCPU), "bare-cpu-ms")
	b.ReportMetric(0, "ns/op")
}

// bareRelay is the bench's bare side: a table of its own, written as the
// outbox's events table is, read once and published, with nothing else.
type bareRelay struct {
	b        *testing.B
	db       *sql.DB
	ob       *outbox.Outbox
	pub      *publisher.Publisher
	keys     int
	read     string
	producer string
}

func bareSide(b *testing.B, k dbKind, db *sql.DB, pub *publisher.Publisher, keys int) *bareRelay {
	ob, err := outbox.New(context.Background(), db, k.dialect, outbox.WithTable("bare"))
	require.NoError(b, err)
	return &bareRelay{b: b, db: db, ob: ob, pub: pub, keys: keys, producer: ob.Producer(),
		read: `SELECT key, seq, data FROM bare ORDER BY key, seq`}
}

// add commits msgs to the bare table, as the relay's round does to the
// outbox.
func (br *bareRelay) add(msgs []*publisher.Message) {
	ctx := context.Background()
	tx, err := br.db.BeginTx(ctx, nil)
	require.NoError(br.b, err)
	for i, m := range msgs {
		require.NoError(br.b, br.ob.Add(ctx, tx, fmt.Sprintf("key-%d", i%br.keys), m))
	}
	require.NoError(br.b, tx.Commit())
}

// publish reads the table in one statement and publishes every event,
// stamped as a relay stamps it, then waits for every result.
func (br *bareRelay) publish() {
	ctx := context.Background()
	rs, err := br.db.QueryContext(ctx, br.read)
	require.NoError(br.b, err)
	var results []*publisher.Result
	for rs.Next() {
		var key string
		var seq int64
		var data []byte
		require.NoError(br.b, rs.Scan(&key, &seq, &data))
		h := map[string]string{}
		ordering.Stamp{Producer: br.producer, Seq: ordering.MakeSeq(0, uint32(seq))}.Put(h)
		results = append(results, br.pub.Publish(ctx, &publisher.Message{Data: data, Headers: h}, publisher.WithOrderingKey(key)))
	}
	require.NoError(br.b, rs.Err())
	require.NoError(br.b, rs.Close())
	for _, r := range results {
		_, err := r.Get(ctx)
		require.NoError(br.b, err)
	}
}

// clear empties the table, outside the round's time.
func (br *bareRelay) clear() {
	_, err := br.db.Exec(`DELETE FROM bare`)
	require.NoError(br.b, err)
}

// A cpuMark is the CPU time this process and each PostgreSQL server
// process had used at a moment: the bench's rounds share two cores with
// the server, and what a round costs in CPU bounds how fast it can go.
type cpuMark struct {
	self time.Duration
	db   map[string]time.Duration // by /proc directory
}

func cpuNow(b *testing.B) cpuMark {
	var ru syscall.Rusage
	require.NoError(b, syscall.Getrusage(syscall.RUSAGE_SELF, &ru))
	m := cpuMark{self: time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), db: map[string]time.Duration{}}
	procs, _ := filepath.Glob("/proc/[0-9]*")
	for _, p := range procs {
		comm, err := os.ReadFile(p + "/comm")
		if err != nil || !bytes.Equal(bytes.TrimSpace(comm), []byte("postgres")) {
			continue // gone, or not the server
		}
		stat, err := os.ReadFile(p + "/schedstat") // run time in ns first
		if f := strings.Fields(string(stat)); err == nil && len(f) > 0 {
			ns, _ := strconv.ParseInt(f[0], 10, 64)
			m.db[p] = time.Duration(ns)
		}
	}
	return m
}

// since returns the CPU time used from m to now; a server process that
// ended meanwhile is left out, one that started counts whole.
func (m cpuMark) since(b *testing.B) time.Duration {
	now := cpuNow(b)
	d := now.self - m.self
	for p, t := range now.db {
		d += t - m.db[p]
	}
	return d
}

func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[len(s)/2]
}

// BenchmarkAdd measures a writer's cost of the outbox: a transaction that
// adds one event with Add, beside one that inserts the same bytes into a
// table of its own, as a service that publishes after its commit would
// record its change. Run with -count to alternate the sides.
func BenchmarkAdd(b *testing.B) {
	for _, k := range kinds {
		b.Run(k.name, func(b *testing.B) {
			ctx := context.Background()
			db := k.open(b)
			ob, err := outbox.New(ctx, db, k.dialect)
			require.NoError(b, err)
			_, err = db.ExecContext(ctx, `CREATE TABLE plain (id BIGINT PRIMARY KEY, key TEXT NOT NULL, data `+map[outbox.Dialect]string{outbox.SQLite: "BLOB", outbox.PostgreSQL: "BYTEA"}[k.dialect]+`)`)
			require.NoError(b, err)
			insert := `INSERT INTO plain (id, key, data) VALUES (?, ?, ?)`
			if k.dialect == outbox.PostgreSQL {
				insert = `INSERT INTO plain (id, key, data) VALUES ($1, $2, $3)`
			}
			msg := &publisher.Message{Data: []byte("event, some bytes of payload to carry")}
			var id int64
			tx1 := func(b *testing.B, f func(tx *sql.Tx, key string) error) {
				for i := 0; b.Loop(); i++ {
					tx, err := db.BeginTx(ctx, nil)
					require.NoError(b, err)
					require.NoError(b, f(tx, fmt.Sprintf("key-%d", i%benchKeys)))
					require.NoError(b, tx.Commit())
				}
			}
			b.Run("outbox", func(b *testing.B) {
				tx1(b, func(tx *sql.Tx, key string) error { return ob.Add(ctx, tx, key, msg) })
			})
			b.Run("insert", func(b *testing.B) {
				tx1(b, func(tx *sql.Tx, key string) error {
					id++
					_, err := tx.ExecContext(ctx, insert, id, key, msg.Data)
					return err
				})
			})
		})
	}
}

// relayOptions are a relay's default options, and on PostgreSQL a
// listener, which wakes it at the commits of other processes.
func relayOptions(k dbKind, dsn string, opts ...outbox.RelayOption) []outbox.RelayOption {
	opts = append(opts, outbox.WithLogger(quiet))
	if k.dialect == outbox.PostgreSQL {
		opts = append(opts, outbox.WithListener(pgtest.Listener(dsn)))
	}
	return opts
}

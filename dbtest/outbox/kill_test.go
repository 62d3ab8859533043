package outbox_test

import (
	"bufio"
	"context"
	"database/sql"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/keyorder/keyorder/internal/harness"
	"github.com/keyorder/keyorder/ordering/orderingtest"
	"github.com/keyorder/keyorder/publisher/outbox"
)

// writers adds events to keys until stop is closed, one transaction per
// event, from two goroutines on keys of their own, and returns, once they
// have stopped, what each key committed, in commit order.
func writers(t *testing.T, ctx context.Context, db *sql.DB, ob *outbox.Outbox, keys int, stop <-chan struct{}) func() map[string][]string {
	var wg sync.WaitGroup
	out := make([]map[string][]string, 2)
	for w := range 2 {
		out[w] = map[string][]string{}
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				key := fmt.Sprintf("key-%d", w+2*(i%(keys/2)))
				d := fmt.Sprintf("%s/%d", key, i)
				add(t, ctx, db, ob, key, d)
				out[w][key] = append(out[w][key], d)
			}
		})
	}
	return func() map[string][]string {
		wg.Wait()
		for k, v := range out[1] {
			out[0][k] = v
		}
		return out[0]
	}
}

// startChild starts a relay process and waits until it runs.
func startChild(t *testing.T, k dbKind, dsn string, e *env) *exec.Cmd {
	t.Helper()
	project, topic := e.client.Project(), e.topic[strings.LastIndex(e.topic, "/")+1:]
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), roleEnv+"=relay",
		relayEnv+"="+fmt.Sprintf("%q %q %d %q %q %q", k.driver, dsn, int(k.dialect), e.srv.Addr, topic, project))
	var stderr harness.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	line, err := bufio.NewReader(out).ReadString('\n')
	require.NoError(t, err, "relay process: %s", stderr.String())
	require.True(t, strings.HasPrefix(line, "running"), line)
	return cmd
}

// TestRelayKilledAndTakenOver kills a relay process with SIGKILL at a
// random point while writers commit, and a second relay takes its shards
// over once its leases run out. Every committed event must be on the
// topic, its first copy in commit order per key, and every copy must be
// one the second relay counted as a re-send.
func TestRelayKilledAndTakenOver(t *testing.T) {
	t.Parallel()
	eachDB(t, func(t *testing.T, k dbKind) {
		t.Parallel()
		ctx := harness.Context(t, testTimeout)
		dsn := k.dsn(t)
		db := k.openDSN(t, dsn)
		ob := newOutbox(t, ctx, db, k)
		e := newEnv(t, orderingtest.WithLatency(5*time.Millisecond))
		stop := make(chan struct{})
		written := writers(t, ctx, db, ob, 20, stop)

		child := startChild(t, k, dsn, e)
		killAt := 50 + rand.IntN(200)
		waitFor(t, e, "the first relay to publish", func() bool { return len(e.srv.Messages(e.topic)) >= killAt })
		require.NoError(t, child.Process.Kill())
		_ = child.Wait()
		close(stop)
		want := written()
		atKill := len(e.srv.Messages(e.topic))

		var logs harness.Buffer
		r, err := outbox.NewRelay(ob, e.publisher(t), outbox.WithLease(time.Second),
			outbox.WithLogger(slog.New(slog.NewJSONHandler(&logs, nil))))
		require.NoError(t, err)
		runRelay(t, r)
		waitFor(t, e, "the outbox to empty", func() bool { return pending(t, db) == 0 })

		v := e.view(t, ob.Producer())
		assert.Empty(t, v.disorder)
		assert.Equal(t, want, v.firsts, "every committed event, once, in commit order")
		assert.LessOrEqual(t, v.copies, int(r.Stats().Resent), "every copy is a counted re-send")
		assert.Contains(t, logs.String(), "keyorder/outbox: shards taken over")
		t.Logf("killed after %d messages on the topic (%d when it died); %d copies, %d counted re-sent", killAt, atKill, v.copies, r.Stats().Resent)
	})
}

// TestTakenShardsReadAtOnce leaves every shard leased to a relay that is
// gone, as one killed mid-lease leaves them, over events committed
// before the next relay starts. That relay polls once a minute, has no
// listener, and no Add of its process wakes it: once the dead relay's
// leases run out, the lease round that takes the shards must read them
// at once, and every event be on the topic well before the poll.
func TestTakenShardsReadAtOnce(t *testing.T) {
	t.Parallel()
	eachDB(t, func(t *testing.T, k dbKind) {
		t.Parallel()
		ctx, db, e, ob := setUp(t, k)
		want := addBacklog(t, ctx, db, ob, 200, 20)
		// A lease from now, as the dead relay's last renewal left them: a
		// relay caps a lease that says more at a lease from its round.
		expires := time.Now().Add(time.Second)
		for s := range ob.Shards() {
			execQ(t, db, k, `INSERT INTO keyorder_outbox_leases (shard, owner, expires) VALUES (?, 'relay#dead', ?)`, s, expires.UnixNano())
		}

		var logs harness.Buffer
		r, err := outbox.NewRelay(ob, e.publisher(t), outbox.WithLease(time.Second), outbox.WithPollInterval(time.Minute),
			outbox.WithLogger(slog.New(slog.NewJSONHandler(&logs, nil))))
		require.NoError(t, err)
		runRelay(t, r)
		waitWithin(t, restartWait, func() bool { return pending(t, db) == 0 }, func() string {
			return fmt.Sprintf("%d events left %v after the leases ran out (the relay's poll is a minute); stats %+v, log:\n%s",
				pending(t, db), time.Since(expires), r.Stats(), logs.String())
		})
		require.False(t, time.Now().Before(expires), "published before the dead relay's leases ran out")
		allOnceInOrder(t, e, db, ob, r, want)
		assert.Contains(t, logs.String(), "keyorder/outbox: shards taken over")
		assert.Contains(t, logs.String(), "relay#dead")
	})
}

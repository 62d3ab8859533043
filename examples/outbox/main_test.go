package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/keyorder/keyorder/dbtest/pgtest"
	"github.com/keyorder/keyorder/internal/harness"
)

// roleEnv makes the test binary run as one of the story's processes: the
// test kills and restarts real processes, as the program does.
const roleEnv = "KEYORDER_OUTBOX_ROLE"

func TestMain(m *testing.M) {
	if os.Getenv(roleEnv) != "" {
		os.Exit(roleMain(os.Args[1:], os.Stderr))
	}
	pgtest.Main(m)
}

// spawnSelf starts the story's processes as this test binary.
func spawnSelf(ctx context.Context) func(args ...string) *exec.Cmd {
	return func(args ...string) *exec.Cmd {
		cmd := exec.CommandContext(ctx, os.Args[0], append([]string{"-role"}, args...)...)
		cmd.Env = append(os.Environ(), roleEnv+"=1")
		return cmd
	}
}

// TestEndToEnd runs the program's story on SQLite files and on PostgreSQL:
// three writer processes, two relays and two replicas, with a relay and a
// replica killed with SIGKILL twice each at random points, and publish
// and ack faults. Every event must be applied exactly once, in commit
// order per account, with nothing lost.
func TestEndToEnd(t *testing.T) {
	endToEnd(t, false)
}

// TestEndToEndEmulatorRedelivery runs the same story on a server that
// redelivers as Google's emulator does: a nacked or expired message comes
// back by itself, in nack order, so a key's later message can arrive
// before an earlier one. Commit order must hold all the same.
func TestEndToEndEmulatorRedelivery(t *testing.T) {
	endToEnd(t, true)
}

// TestEndToEndSigned runs the story with signed stamps: the relays sign
// each stamp with a key made for the run, the replicas verify them, and
// midway two messages are published as the outbox's, on a real account,
// with a number far ahead, one unsigned and one signed with another key.
// Every event the service stored must verify and neither forged message;
// both must have reached a replica, which dropped them; and every event
// must still be applied exactly once, in commit order: trusted, the
// forged number would have made the account's next events copies.
func TestEndToEndSigned(t *testing.T) {
	endToEndWith(t, func(t *testing.T, cfg *config) {
		cfg.stampKey = make([]byte, 32)
		_, err := rand.Read(cfg.stampKey)
		require.NoError(t, err)
		cfg.forge = true
	}, func(t *testing.T, oc outcome, out string) {
		// The chaos loses publish responses, so the fake may store a
		// forged message twice, as the service would after a retry.
		assert.GreaterOrEqual(t, oc.forged, 2, "both forged messages stored")
		assert.Contains(t, out, fmt.Sprintf("every event's stamp signed; %d forged messages stored, none verified", oc.forged))
		assert.Contains(t, out, notProven, "a replica dropped a forged message")
	})
}

// TestEndToEndHandOverBeforeApply runs the story on a server that
// redelivers as Google's emulator does, with a first replica that
// receives events and ends its Receive before applying any; the other
// replicas start only then, and take over what it gave back, one message
// at a time in nack order. Every event must be applied exactly once, in
// commit order.
func TestEndToEndHandOverBeforeApply(t *testing.T) {
	endToEndWith(t, func(t *testing.T, cfg *config) {
		cfg.emulatorRedelivery = true
		cfg.handOver = true
	}, func(t *testing.T, oc outcome, out string) {
		assert.Contains(t, out, handedOver)
	})
}

func endToEnd(t *testing.T, emulatorRedelivery bool) {
	endToEndWith(t, func(t *testing.T, cfg *config) { cfg.emulatorRedelivery = emulatorRedelivery }, nil)
}

// endToEndWith runs the story on SQLite and on PostgreSQL, with the
// configuration set changes, and checks what every run must show, then
// what more checks.
func endToEndWith(t *testing.T, set func(t *testing.T, cfg *config), more func(t *testing.T, oc outcome, out string)) {
	for _, db := range []struct {
		name string
		dsns func(t *testing.T) (source, sink string)
	}{
		{"sqlite", func(t *testing.T) (string, string) {
			dir := t.TempDir()
			return filepath.Join(dir, "writers.db"), filepath.Join(dir, "receivers.db")
		}},
		{"postgres", func(t *testing.T) (string, string) {
			return "postgres:" + pgtest.DSN(t), "postgres:" + pgtest.DSN(t)
		}},
	} {
		t.Run(db.name, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
			defer cancel()
			cfg := defaultConfig()
			cfg.changes = 100
			cfg.source, cfg.sink = db.dsns(t)
			set(t, &cfg)
			t.Logf("seed %d", cfg.seed)
			var out harness.Buffer // the processes write it at once
			oc, err := run(ctx, cfg, spawnSelf(ctx), &out)
			require.NoError(t, err, "seed %d\n%s", cfg.seed, out.String())
			assert.Equal(t, cfg.total(), oc.report.applied)
			assert.Positive(t, oc.relayKills, "a relay was killed")
			assert.Positive(t, oc.replKills, "a replica was killed")
			assert.Greater(t, oc.stored, cfg.total(), "copies were stored: the inbox and the stamps had something to skip")
			assert.Greater(t, oc.delivered, oc.stored, "messages came back")
			assert.Contains(t, out.String(), "every event applied exactly once")
			if more != nil {
				more(t, oc, out.String())
			}
			t.Log(out.String())
		})
	}
}

// TestCheckFinds checks that the story's check fails on an event applied
// twice, one missing, and two out of order.
func TestCheckFinds(t *testing.T) {
	cfg := config{writers: 1, changes: 3}
	good := report{versions: map[string]int64{"a": 3}, balances: map[string][2]int64{"a": {6, 6}},
		journal: map[string][]int64{"a": {1, 2, 3}}, applied: 3}
	var out bytes.Buffer
	require.NoError(t, check(good, cfg, &out))
	for name, journal := range map[string][]int64{
		"twice":        {1, 2, 2, 3},
		"missing":      {1, 3},
		"out of order": {1, 3, 2},
	} {
		bad := good
		bad.journal = map[string][]int64{"a": journal}
		bad.applied = len(journal)
		assert.Error(t, check(bad, cfg, &out), name)
	}
	wrong := good
	wrong.balances = map[string][2]int64{"a": {6, 5}}
	assert.Error(t, check(wrong, cfg, &out), "a balance that differs")
}

// TestDSNsThroughTheEnvironment checks that the story's processes get the
// databases' DSNs, passwords included, through their environment, not on
// their command lines, which any local user may read.
func TestDSNsThroughTheEnvironment(t *testing.T) {
	const secret = "postgres:host=db user=u password=hunter2"
	cfg := defaultConfig()
	cfg.source, cfg.sink = secret, secret+"-sink"
	ps := startAll(cfg, "localhost:1", func(args ...string) *exec.Cmd { return exec.Command("true", args...) }, io.Discard)
	for _, p := range ps.all() {
		cmd := p.start()
		assert.NotContains(t, strings.Join(cmd.Args, " "), "hunter2", p.name)
		assert.Contains(t, cmd.Env, sourceEnv+"="+secret, p.name)
		assert.Contains(t, cmd.Env, sinkEnv+"="+secret+"-sink", p.name)
	}
}

// TestStampKeyThroughTheEnvironment checks that the stamp key reaches the
// relays and the replicas through their environment, not their command
// lines, and the writers, which do not sign, not at all.
func TestStampKeyThroughTheEnvironment(t *testing.T) {
	cfg := defaultConfig()
	cfg.stampKey = bytes.Repeat([]byte{0xab}, 32)
	cfg.handOver = true
	ps := startAll(cfg, "localhost:1", func(args ...string) *exec.Cmd { return exec.Command("true", args...) }, io.Discard)
	want := stampKeyEnv + "=" + strings.Repeat("ab", 32)
	for _, p := range ps.all() {
		cmd := p.start()
		assert.NotContains(t, strings.Join(cmd.Args, " "), "abab", p.name)
		if strings.HasPrefix(p.name, "writer") {
			assert.NotContains(t, cmd.Env, want, p.name)
		} else {
			assert.Contains(t, cmd.Env, want, p.name)
		}
	}
	key, err := parseStampKey(strings.Repeat("ab", 32))
	require.NoError(t, err)
	assert.Equal(t, cfg.stampKey, key)
	_, err = parseStampKey("abcd")
	assert.Error(t, err, "a key of 2 bytes")
}

// TestStoppedWhileStarting checks that a relay or a replica whose run
// ends (here by its -timeout; in the story, by the SIGTERM of a stop)
// before it has connected exits 0, as a stop, and a writer 1: a CI run
// saw a relay stopped right after its restart fail the story with
// "connect: context canceled".
func TestStoppedWhileStarting(t *testing.T) {
	for _, tc := range []struct {
		role string
		want int
	}{{"relay", 0}, {"replica", 0}, {"writer", 1}} {
		t.Run(tc.role, func(t *testing.T) {
			dir := t.TempDir()
			t.Setenv(sourceEnv, filepath.Join(dir, "writers.db"))
			t.Setenv(sinkEnv, filepath.Join(dir, "receivers.db"))
			var log strings.Builder
			got := roleMain([]string{"-role", tc.role, "-addr", "localhost:1", "-timeout", "1ns"}, &log)
			assert.Equal(t, tc.want, got, log.String())
		})
	}
}

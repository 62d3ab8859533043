package main

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/keyorder/keyorder/internal/leaktest"
	"github.com/keyorder/keyorder/ordering/orderingtest"
)

// roleEnv makes the test binary run as a receiver process: the test kills
// and restarts real processes, as the program does.
const roleEnv = "KEYORDER_INBOX_ROLE"

func TestMain(m *testing.M) {
	if os.Getenv(roleEnv) == "receive" {
		os.Exit(receiveMain(os.Args[1:], os.Stderr))
	}
	leaktest.VerifyTestMain(m)
}

// spawnSelf starts receivers as this test binary in the receiver role.
func spawnSelf(ctx context.Context) func(args ...string) *exec.Cmd {
	return func(args ...string) *exec.Cmd {
		cmd := exec.CommandContext(ctx, os.Args[0], args...)
		cmd.Env = append(os.Environ(), roleEnv+"=receive")
		return cmd
	}
}

// TestInboxSurvivesKill runs the program's story: the first receiver
// process is killed with SIGKILL in the middle of the run, with deposits
// applied whose acks never reached the server, and a second one finishes.
// Each deposit's effect must be in the store exactly once.
func TestInboxSurvivesKill(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cfg := config{accounts: 6, deposits: 30, db: filepath.Join(t.TempDir(), "inbox.db")}
	var out bytes.Buffer
	oc, err := run(ctx, cfg, spawnSelf(ctx), &out)
	require.NoError(t, err, out.String())
	total := cfg.accounts * cfg.deposits
	assert.Positive(t, oc.atKill, "the first receiver applied deposits before it was killed")
	assert.Less(t, oc.atKill, total, "the first receiver was killed in the middle of the run")
	assert.Equal(t, total, oc.report.applied)
	assert.Empty(t, oc.report.twice)
	assert.GreaterOrEqual(t, oc.report.redelivered, 1, "deposits applied before the kill came back")
	assert.Contains(t, out.String(), "every deposit applied exactly once")
}

// TestCheckFindsDoubleApplication checks that the program's check fails
// when the store holds an effect twice or misses one.
func TestCheckFindsDoubleApplication(t *testing.T) {
	t.Parallel()
	cfg := config{accounts: 1, deposits: 3}
	good := report{applied: 3, redelivered: 1, balances: map[string]int64{"acct-01": amount(1, 1) + amount(1, 2) + amount(1, 3)}}
	var out bytes.Buffer
	require.NoError(t, check(good, cfg, statsOf(5), &out))

	twice := good
	twice.applied, twice.twice = 4, []string{"acct-01#2 (2 times)"}
	twice.balances = map[string]int64{"acct-01": good.balances["acct-01"] + amount(1, 2)}
	assert.Error(t, check(twice, cfg, statsOf(5), &out))

	missing := good
	missing.applied = 2
	missing.balances = map[string]int64{"acct-01": amount(1, 1) + amount(1, 3)}
	assert.Error(t, check(missing, cfg, statsOf(5), &out))

	quiet := good
	quiet.redelivered = 0
	assert.Error(t, check(quiet, cfg, statsOf(3), &out), "a run where nothing came back demonstrates nothing")
}

func statsOf(delivered int) orderingtest.Stats { return orderingtest.Stats{Delivered: delivered} }

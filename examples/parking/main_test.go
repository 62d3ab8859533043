package main

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/keyorder/keyorder/internal/harness"
	"github.com/keyorder/keyorder/internal/leaktest"
)

func TestMain(m *testing.M) { leaktest.VerifyTestMain(m) }

// TestRun runs what `go run ./examples/parking` runs, on its embedded fake:
// run fails if any account's events ran out of order, twice or not at all.
func TestRun(t *testing.T) {
	t.Setenv(harness.EmulatorEnv, "") // not the developer's emulator
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var out bytes.Buffer
	require.NoError(t, run(ctx, &out), out.String())
	for _, want := range []string{
		"parked: acct-2, 4 events, because: permanent: unreadable amount \"thirty\" in event 3",
		"acct-2: events 1 2, balance 30",
		"6 events parked",
		"acct-2: events 1 2 3 4 5 6 7 8 9, balance 450",
		"acct-1: events 1 2 3 4 5 6, balance 210",
		"order check: 3 keys (0 violating order), 21 records: 0 out of order, 0 missing, 0 unexpected, 0 duplicates",
		"nothing is parked",
	} {
		assert.Contains(t, out.String(), want)
	}
}

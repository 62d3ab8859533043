package main

import (
	"os"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/keyorder/keyorder/internal/harness"
	"github.com/keyorder/keyorder/internal/leaktest"
)

func TestMain(m *testing.M) { leaktest.VerifyTestMain(m) }

// TestRun runs the example against its embedded pstest server; run checks
// P1 and P2 on what the server stored and fails if they do not hold.
func TestRun(t *testing.T) {
	if os.Getenv(harness.EmulatorEnv) != "" {
		t.Skip("runs against the embedded server only")
	}
	require.NoError(t, run())
}

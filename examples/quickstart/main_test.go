package main

import (
	"bytes"
	"io"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/keyorder/keyorder/internal/harness"
	"github.com/keyorder/keyorder/internal/leaktest"
	"github.com/keyorder/keyorder/ordering/orderingtest"
)

func TestMain(m *testing.M) { leaktest.VerifyTestMain(m) }

// TestREADMEShowsThisProgram keeps the README's quickstart and this file
// the same, so that the program the README shows is the one tested.
func TestREADMEShowsThisProgram(t *testing.T) {
	src, err := os.ReadFile("main.go")
	require.NoError(t, err)
	readme, err := os.ReadFile("../../README.md")
	require.NoError(t, err)
	assert.Contains(t, string(readme), "```go\n"+string(src)+"```\n", "README's quickstart differs from examples/quickstart/main.go")
}

// TestRunOnFake runs the quickstart against the faithful fake, as a user
// with PUBSUB_EMULATOR_HOST set would, and checks each customer's orders
// came in publish order.
func TestRunOnFake(t *testing.T) {
	srv := orderingtest.Start(t)
	t.Setenv(harness.EmulatorEnv, srv.Addr)

	out := captureStdout(t, func() {
		require.NoError(t, run(harness.Context(t, 20*time.Second)))
	})
	perCustomer := map[string][]string{}
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		customer, event, ok := strings.Cut(line, ": ")
		require.True(t, ok, "line %q", line)
		perCustomer[customer] = append(perCustomer[customer], event)
	}
	assert.Equal(t, map[string][]string{
		"c-7": {"created", "paid", "shipped"},
		"c-9": {"created", "paid"},
	}, perCustomer)
}

// captureStdout returns what f writes to standard output.
func captureStdout(t *testing.T, f func()) string {
	t.Helper()
	r, w, err := os.Pipe()
	require.NoError(t, err)
	old := os.Stdout
	os.Stdout = w
	var buf bytes.Buffer
	copied := make(chan struct{})
	go func() {
		defer close(copied)
		_, _ = io.Copy(&buf, r)
	}()
	func() {
		defer func() { os.Stdout = old }()
		f()
	}()
	require.NoError(t, w.Close())
	<-copied
	return buf.String()
}

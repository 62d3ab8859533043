package main

import (
	"bytes"
	"context"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/keyorder/keyorder/internal/harness"
	"github.com/keyorder/keyorder/internal/leaktest"
	"github.com/keyorder/keyorder/ordering/orderingtest"
)

// checked probes addr with ps as -check does and returns, per feature,
// whether the server has it.
func checked(t *testing.T, addr string, ps []probe) map[string]bool {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var out bytes.Buffer
	require.NoError(t, check(ctx, addr, &out, ps))
	got := map[string]bool{}
	cols := regexp.MustCompile(`\s{2,}`)
	for _, line := range strings.Split(out.String(), "\n")[2:] {
		if f := cols.Split(line, -1); len(f) >= 2 {
			got[f[0]] = f[1] == "yes"
		}
	}
	require.Len(t, got, len(ps), out.String())
	t.Log("\n" + out.String())
	return got
}

// TestCheck: -check reports every feature on keyorder's fake, and on
// pstest and Google's emulator what they lack, as orderingtest's doc
// tables them. Not parallel: it shortens the probes' timeout, which a
// server that never pushes waits out.
func TestCheck(t *testing.T) {
	defer func(d time.Duration) { checkTimeout = d }(checkTimeout)
	checkTimeout = 3 * time.Second

	t.Run("orderingtest", func(t *testing.T) {
		var out bytes.Buffer
		require.NoError(t, run(context.Background(), []string{"-check", orderingtest.Start(t).Addr}, &out), "the command")
		assert.Contains(t, out.String(), "subscription filters")
		for f, ok := range checked(t, orderingtest.Start(t).Addr, probes) {
			assert.True(t, ok, f)
		}
	})
	t.Run("pstest", func(t *testing.T) {
		srv, err := harness.StartPstest("127.0.0.1:0")
		require.NoError(t, err)
		defer srv.Close()
		// Not its last probe, the ordered Seek, which crashes pstest in
		// this process: the doc's table says so.
		got := checked(t, srv.Addr, probes[:len(probes)-1])
		assert.True(t, got["subscription filters"])
		assert.False(t, got["a nack redelivers the key's tail"])
		assert.False(t, got["push requests carry an OIDC token"], "pstest does not push")
	})
	t.Run("Google's emulator", func(t *testing.T) {
		// The restart probe abandons a consumer and closes its client:
		// the client's goroutines end as its connection closes, which may
		// come after goleak's look at the end of the package. They must
		// end, so they are waited for, within a bound.
		before := goleak.IgnoreCurrent()
		defer leaktest.Await(t, 2*time.Minute, before)
		got := checked(t, harness.GoogleEmulator(t), probes)
		assert.False(t, got["subscription filters"], "it takes a filter and delivers everything")
		assert.False(t, got["Seek to a time, ordered subscription"])
		assert.False(t, got["a nack redelivers the key's tail"], "it redelivers only the nacked message")
		assert.False(t, got["push requests carry an OIDC token"])
		assert.False(t, got["push requests carry the ordering key"])
		assert.True(t, got["ordered subscriptions"])
		assert.False(t, got["keys come back after a consumer restart"], "it never cleans up a dead consumer's stream")
	})
}

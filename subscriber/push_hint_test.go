package subscriber_test

import (
	"context"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/keyorder/keyorder/internal/harness"
	"github.com/keyorder/keyorder/subscriber"
)

// TestPushHints: a push endpoint that gets requests without a token, as
// Google's emulator sends them, says why it refuses them, once; and one
// whose ordered subscription gets a push without an ordering key says
// that it runs unordered, once.
func TestPushHints(t *testing.T) {
	t.Parallel()
	var logs harness.Buffer
	logger := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	ran := make(chan struct{}, 4)
	e := newPushEnv(t, func(context.Context, *subscriber.Delivery) error {
		ran <- struct{}{}
		return nil
	}, subscriber.WithLogger(logger))

	for range 2 {
		resp, err := http.Post(e.endpoint, "application/json", strings.NewReader(`{}`))
		require.NoError(t, err)
		_ = resp.Body.Close()
		assert.Equal(t, http.StatusUnauthorized, resp.StatusCode)
	}
	assert.Equal(t, 1, strings.Count(logs.String(), "a push request carries no token"), logs.String())

	publishRange(t, e.client, e.topic, []string{""}, 1, 2, "")
	awaitSignal(t, ran, "the first push ran")
	awaitSignal(t, ran, "the second push ran")
	assert.Equal(t, 1, strings.Count(logs.String(), "a push to an ordered subscription carries no ordering key"), logs.String())
}

// awaitSignal waits for ch, failing t after testTimeout.
func awaitSignal(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(testTimeout):
		t.Fatalf("timed out waiting: %s", what)
	}
}

package main

import (
	"bytes"
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/keyorder/keyorder/internal/leaktest"
	"github.com/keyorder/keyorder/subscriber"
)

func TestMain(m *testing.M) { leaktest.VerifyTestMain(m) }

// TestRun runs what `go run ./examples/push` runs: run fails if any event
// was applied out of order, twice or not at all, or if a forged request
// got in.
func TestRun(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var out bytes.Buffer
	require.NoError(t, run(ctx, &out), out.String())
	for _, want := range []string{
		"published 10 events for 3 customers",
		"  c-1: created, paid, shipped, delivered\n",
		"  c-2: created, paid failed (payment service unavailable), paid (attempt 2), shipped, delivered\n",
		"  c-3: created, paid\n",
		"the fake pushed 11 times: 10 answered 204 (ack), 1 answered 500 (nack, pushed again)",
		"forged request without a token: 401 Unauthorized, handler ran: false",
		"forged request with a token signed by another key: 401 Unauthorized, handler ran: false",
		"forged request that sends 10 bytes of 1000, then nothing: 401 Unauthorized at once",
		"closed the HTTP server\nclosed the subscription\nclosed the fake\n",
		"every event was applied once, in order per customer, and the forged requests were refused",
	} {
		assert.Contains(t, out.String(), want)
	}
}

// TestBookCheck: the book refuses an event that is not its customer's
// next one, and check reports it, as it reports a customer left short.
// TestPushServerTimeouts: the example's server bounds how long a client
// may take to send a request, its answer may take, and an idle connection
// may stay.
func TestPushServerTimeouts(t *testing.T) {
	t.Parallel()
	web := pushServer(http.NotFoundHandler())
	assert.Positive(t, web.ReadHeaderTimeout)
	assert.Positive(t, web.ReadTimeout)
	assert.Greater(t, web.WriteTimeout, 10*time.Second, "longer than the default ack deadline")
	assert.Positive(t, web.IdleTimeout)
}

func TestBookCheck(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		events map[string][]string
		want   string // in check's error; "" for none
	}{
		{"all in order", map[string][]string{"c-1": lifecycle, "c-2": lifecycle, "c-3": lifecycle[:2]}, ""},
		{"out of order", map[string][]string{"c-1": {"created", "shipped", "paid", "delivered"}, "c-2": lifecycle, "c-3": lifecycle[:2]}, `c-1: shipped after "created"`},
		{"twice", map[string][]string{"c-1": lifecycle, "c-2": lifecycle, "c-3": {"created", "paid", "paid"}}, `c-3: paid after "paid"`},
		{"not at all", map[string][]string{"c-1": lifecycle[:3], "c-2": lifecycle, "c-3": lifecycle[:2]}, `c-1: at "shipped", not "delivered"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := newBook()
			for c, events := range tc.events {
				for _, e := range events {
					// Attempt 2: past the flaky event's one failure.
					require.NoError(t, b.apply(context.Background(), &subscriber.Delivery{Key: c, Data: []byte(e), Attempt: 2}))
				}
			}
			if tc.want == "" {
				assert.NoError(t, b.check())
			} else {
				assert.ErrorContains(t, b.check(), tc.want)
			}
		})
	}
}

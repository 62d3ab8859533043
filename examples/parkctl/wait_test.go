package main

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/keyorder/keyorder/internal/leaktest"
	"github.com/keyorder/keyorder/publisher"
	"github.com/keyorder/keyorder/subscriber"
)

// stamped is a writer that keeps each write with when it came: parkctl
// writes each line in one call.
type stamped struct {
	mu    sync.Mutex
	lines []stampedLine
}

type stampedLine struct {
	at   time.Time
	text string
}

func (s *stamped) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.lines = append(s.lines, stampedLine{time.Now(), string(p)})
	return len(p), nil
}

// find returns the first line containing text, and whether there is one.
func (s *stamped) find(text string) (stampedLine, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, l := range s.lines {
		if strings.Contains(l.text, text) {
			return l, true
		}
	}
	return stampedLine{}, false
}

func (s *stamped) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var b strings.Builder
	for _, l := range s.lines {
		b.WriteString(l.text)
	}
	return b.String()
}

// TestParkctlServerLostDuringTheWait: release waits for a request no
// Receive carries out, with the default progress cadence, and the server
// is killed a few seconds in, once two progress lines have come. A line
// comes every few seconds; the loss is reported as the server being
// unreachable within -reach of the kill (and some slack for a look under
// way); and the wait ends by -timeout, with exit 1 and a last word that
// says the server stopped answering. Nothing here sleeps: each bound is a
// deadline measured from a moment the test saw.
func TestParkctlServerLostDuringTheWait(t *testing.T) {
	srv, ctx := parkedNoService(t)
	// The official client, whose stream the dead server broke, retries
	// it after a backoff, which ends once it finds its client closed.
	defer func(ignore goleak.Option, begun time.Time) {
		leaktest.Await(t, 2*time.Minute, ignore)
		t.Logf("the official client's goroutines ended %v after the command", time.Since(begun))
	}(goleak.IgnoreCurrent(), time.Now())
	const timeout, reach = 8 * time.Second, time.Second
	var out, errOut stamped
	begun := time.Now()
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, []string{"release", "-sub", "ledger-balances", "-parking", "ledger-parked",
			"-timeout", timeout.String(), "-reach", reach.String(), "acct-1"}, &out, &errOut)
	}()
	require.NoError(t, poll(ctx, func() bool { return strings.Count(errOut.String(), "waiting for a Receive") >= 2 }), errOut.String())
	first, _ := errOut.find("waiting for a Receive")
	killed := time.Now()
	assert.Less(t, killed.Sub(first.at), stillEvery+2*time.Second, "a second progress line within a few seconds of the first")
	require.NoError(t, srv.Close())

	require.NoError(t, poll(ctx, func() bool { _, ok := errOut.find("cannot reach the Pub/Sub server"); return ok }), errOut.String())
	lost, _ := errOut.find("cannot reach the Pub/Sub server")
	assert.Less(t, lost.at.Sub(killed), reach+progressEvery+2*time.Second, "reported within -reach of the loss: %s", errOut.String())
	assert.Contains(t, lost.text, "no answer within -reach 1s")

	var code int
	select {
	case code = <-done:
	case <-ctx.Done():
		t.Fatalf("release never ended: %s", errOut.String())
	}
	assert.Less(t, time.Since(begun), timeout+3*time.Second, "the wait ends by -timeout")
	assert.Equal(t, exitFail, code)
	assert.Empty(t, out.String())
	assert.Contains(t, errOut.String(), "has not answered for")
	assert.Contains(t, errOut.String(), "the request stays recorded")
}

// poll waits until cond holds, checking every 10 ms, or returns ctx.Err().
func poll(ctx context.Context, cond func() bool) error {
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		select {
		case <-tick.C:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// TestParkctlSaysWhatHappened: a release of a key that an earlier release
// unparked says so, not only that the key is not parked; list on a
// subscription that never parked a key says it parks nothing.
func TestParkctlSaysWhatHappened(t *testing.T) {
	_, client, sub, ctx := service(t, subscriber.WithMaxAttempts(1), subscriber.WithBackoff(time.Millisecond, 10*time.Millisecond))
	p, err := publisher.New(client, "ledger")
	require.NoError(t, err)
	_, err = p.Publish(ctx, &publisher.Message{Data: []byte("acct-1/1")}, publisher.WithOrderingKey("acct-1")).Get(ctx)
	require.NoError(t, err)
	require.NoError(t, p.Close(ctx))
	var fixed atomic.Bool
	rctx, stop := context.WithCancel(ctx)
	received := make(chan error, 1)
	go func() {
		received <- sub.Receive(rctx, func(context.Context, *subscriber.Delivery) error {
			if !fixed.Load() {
				return subscriber.Permanent(errors.New("amount is not a number"))
			}
			return nil
		})
	}()
	defer func() {
		stop()
		require.NoError(t, <-received)
	}()
	require.NoError(t, poll(ctx, func() bool {
		list, err := sub.Parked(ctx)
		return err == nil && len(list) == 1
	}), "acct-1 was not parked")
	fixed.Store(true)
	global := []string{"-sub", "ledger-balances", "-parking", "ledger-parked"}
	code, _, errOut := parkctl(ctx, append(global, "release", "acct-1")...)
	require.Equal(t, exitOK, code, errOut)

	for _, wait := range []string{"-wait=true", "-wait=false"} {
		code, out, errOut := parkctl(ctx, append(global, "release", wait, "acct-1")...)
		assert.Equal(t, exitFail, code, wait)
		assert.Empty(t, out)
		assert.Contains(t, errOut, `release of "acct-1": released already, by an earlier release`, wait)
	}
	code, _, errOut = parkctl(ctx, append(global, "release", "acct-9")...)
	assert.Equal(t, exitFail, code)
	assert.NotContains(t, errOut, "released already")

	_, err = subscriber.CreateWithTopic(ctx, client, "ledger", "ledger-plain")
	require.NoError(t, err)
	code, _, errOut = parkctl(ctx, "list", "-sub", "ledger-plain")
	assert.Equal(t, exitFail, code)
	assert.Contains(t, errOut, "subscription projects/keyorder-test/subscriptions/ledger-plain parks nothing")
}

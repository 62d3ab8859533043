package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"cloud.google.com/go/pubsub/v2"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/keyorder/keyorder/internal/harness"
	"github.com/keyorder/keyorder/internal/leaktest"
	"github.com/keyorder/keyorder/ordering"
	"github.com/keyorder/keyorder/ordering/orderingtest"
	"github.com/keyorder/keyorder/publisher"
	"github.com/keyorder/keyorder/subscriber"
)

func TestMain(m *testing.M) { leaktest.VerifyTestMain(m) }

// service starts the faithful fake, points parkctl at it, and creates on
// it the subscription ledger-balances of the topic ledger, which parks to
// ledger-parked, as the service beside parkctl would.
func service(t *testing.T, opts ...subscriber.Option) (*orderingtest.Server, *pubsub.Client, *subscriber.Subscription, context.Context) {
	t.Helper()
	t.Setenv("GOOGLE_CLOUD_PROJECT", "")
	srv, client := harness.Fake(t)
	t.Setenv(harness.EmulatorEnv, srv.Addr)
	ctx := harness.Context(t, time.Minute)
	sub, err := subscriber.CreateWithTopic(ctx, client, "ledger", "ledger-balances", append(opts, subscriber.WithParking("ledger-parked"))...)
	require.NoError(t, err)
	return srv, client, sub, ctx
}

// parkctl runs the command with args and returns its exit status and what
// it wrote.
func parkctl(ctx context.Context, args ...string) (code int, out, errOut string) {
	var o, e harness.Buffer
	code = run(ctx, args, &o, &e)
	return code, o.String(), e.String()
}

// ledger is the handler of the service the test runs: it records what ran,
// per key, and fails acct-1's third event until the fix is in. Once it is,
// the event's call waits for proceed, so that the test can look at a
// release while it runs.
type ledger struct {
	fixed   atomic.Bool
	running chan struct{} // closed when acct-1/3 runs with the fix
	proceed chan struct{} // closed by the test to let it go on

	mu  sync.Mutex
	ran map[string][]string // data, per key, in the order it ran
}

var errAmount = errors.New("amount is not a number")

func (l *ledger) handle(_ context.Context, d *subscriber.Delivery) error {
	if string(d.Data) == "acct-1/3" {
		if !l.fixed.Load() {
			return subscriber.Permanent(errAmount)
		}
		close(l.running)
		<-l.proceed
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.ran[d.Key] = append(l.ran[d.Key], string(d.Data))
	return nil
}

func (l *ledger) runs() map[string][]string {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := map[string][]string{}
	for k, v := range l.ran {
		out[k] = append([]string(nil), v...)
	}
	return out
}

// TestParkctl runs the command against the faithful fake, beside a
// service that receives the subscription and parks acct-1 on a poison
// event: it lists the key, fails to release it before the fix (the
// service's handler fails again), releases it after the fix (the
// service's Receive carries the release out, in order), and replays the
// topic and the parking topic as JSON lines.
func TestParkctl(t *testing.T) {
	srv, client, sub, ctx := service(t, subscriber.WithMaxAttempts(1),
		subscriber.WithBackoff(time.Millisecond, 10*time.Millisecond), subscriber.WithTopicRetention(24*time.Hour))
	global := []string{"-sub", "ledger-balances", "-parking", "ledger-parked"}

	p, err := publisher.New(client, "ledger")
	require.NoError(t, err)
	type msg struct {
		key     string
		data    []byte
		headers map[string]string
	}
	var msgs []msg
	for i := 1; i <= 5; i++ {
		msgs = append(msgs, msg{key: "acct-1", data: fmt.Appendf(nil, "acct-1/%d", i)})
	}
	for i := 1; i <= 2; i++ {
		msgs = append(msgs, msg{key: "acct-2", data: fmt.Appendf(nil, "acct-2/%d", i), headers: map[string]string{"source": "bank"}})
	}
	binary := []byte{0xff, 0xfe, 'x'}
	msgs = append(msgs, msg{key: "acct-3", data: binary})
	for _, m := range msgs {
		_, err := p.Publish(ctx, &publisher.Message{Data: m.data, Headers: m.headers}, publisher.WithOrderingKey(m.key)).Get(ctx)
		require.NoError(t, err)
	}
	require.NoError(t, p.Close(ctx))

	l := &ledger{running: make(chan struct{}), proceed: make(chan struct{}), ran: map[string][]string{}}
	rctx, stop := context.WithCancel(ctx)
	received := make(chan error, 1)
	go func() { received <- sub.Receive(rctx, l.handle) }()
	defer func() {
		stop()
		require.NoError(t, <-received)
	}()
	require.NoError(t, srv.WaitFor(ctx, func() bool {
		list, err := sub.Parked(ctx)
		return err == nil && len(list) == 1 && list[0].Messages == 3 && len(l.runs()["acct-2"]) == 2
	}), "acct-1 was not parked")

	// list
	code, out, errOut := parkctl(ctx, append(global, "list")...)
	require.Equal(t, exitOK, code, errOut)
	rows := strings.Split(strings.TrimSpace(out), "\n")
	require.Len(t, rows, 2, out)
	assert.Regexp(t, `^KEY\s+PARKED SINCE\s+MESSAGES\s+STATE\s+MESSAGE\s+LAST ERROR$`, rows[0])
	assert.Regexp(t, `^acct-1\s+\S+ \(\d+s ago\)\s+3\s+parked\s+\S+\s+permanent: amount is not a number$`, rows[1])

	// release, before the fix: the service's handler fails again.
	code, _, errOut = parkctl(ctx, append(global, "release", "-timeout", "30s", "acct-1")...)
	assert.Equal(t, exitFail, code)
	assert.Contains(t, errOut, "amount is not a number")
	assert.Contains(t, errOut, "the key stays parked")

	// release, after the fix: the service carries it out while parkctl
	// waits, and list shows it meanwhile.
	l.fixed.Store(true)
	type result struct {
		code        int
		out, errOut string
	}
	released := make(chan result, 1)
	go func() {
		code, out, errOut := parkctl(ctx, append(global, "release", "-timeout", "30s", "acct-1")...)
		released <- result{code, out, errOut}
	}()
	select {
	case <-l.running:
	case <-ctx.Done():
		t.Fatal("the service never released acct-1")
	}
	code, out, errOut = parkctl(ctx, append(global, "list")...)
	require.Equal(t, exitOK, code, errOut)
	assert.Regexp(t, `acct-1\s+.*\s+3\s+releasing, release requested \d+s ago by parkctl\S* on \S+ \(pid \d+\)\s`, out)
	close(l.proceed)
	res := <-released
	require.Equal(t, exitOK, res.code, res.errOut)
	assert.Equal(t, "released \"acct-1\": its parked messages ran, in order, and it is unparked\n", res.out)
	assert.Equal(t, map[string][]string{
		"acct-1": {"acct-1/1", "acct-1/2", "acct-1/3", "acct-1/4", "acct-1/5"},
		"acct-2": {"acct-2/1", "acct-2/2"},
		"acct-3": {string(binary)},
	}, l.runs(), "each event once, in order")

	code, out, _ = parkctl(ctx, append(global, "list")...)
	assert.Equal(t, exitOK, code)
	assert.Equal(t, "no key of projects/keyorder-test/subscriptions/ledger-balances is parked\n", out)
	code, _, errOut = parkctl(ctx, append(global, "release", "acct-1")...)
	assert.Equal(t, exitFail, code)
	assert.Contains(t, errOut, "key is not parked")

	// replay: the topic's history, as JSON lines.
	code, out, errOut = parkctl(ctx, "replay", "-quiet", "300ms", "ledger")
	require.Equal(t, exitOK, code, errOut)
	lines := decodeLines(t, out)
	byKey := map[string][]line{}
	for _, ln := range lines {
		byKey[ln.Key] = append(byKey[ln.Key], ln)
	}
	originals := srv.Messages("projects/keyorder-test/topics/ledger")
	require.Len(t, lines, len(originals))
	for _, m := range originals {
		got := byKey[m.OrderingKey][0]
		byKey[m.OrderingKey] = byKey[m.OrderingKey][1:]
		assert.Equal(t, m.ID, got.ID, "in publish order per key")
		assert.True(t, m.PublishTime.Equal(got.PublishTime), "%s: %v, %v", m.ID, m.PublishTime, got.PublishTime)
		st, err := ordering.ParseStamp(m.Attributes)
		require.NoError(t, err)
		assert.Equal(t, st.Producer, got.Producer)
		assert.Equal(t, ordering.FormatSeq(st.Seq), got.Seq)
		assert.Regexp(t, `^\d+\.\d+$`, got.Seq)
		if m.OrderingKey == "acct-2" {
			assert.Equal(t, map[string]string{"source": "bank"}, got.Attributes, "less the stamp")
		} else {
			assert.Empty(t, got.Attributes)
		}
		if m.OrderingKey == "acct-3" {
			assert.Nil(t, got.Data)
			assert.Equal(t, binary, got.DataBase64)
		} else {
			require.NotNil(t, got.Data)
			assert.Equal(t, string(m.Data), *got.Data)
			assert.Empty(t, got.DataBase64)
		}
	}

	// The parking topic, with what keyorder adds to a parked message.
	code, out, errOut = parkctl(ctx, "replay", "-quiet", "300ms", "ledger-parked")
	require.Equal(t, exitOK, code, errOut)
	var parked []string
	for _, ln := range decodeLines(t, out) {
		parked = append(parked, *ln.Data)
		assert.NotEmpty(t, ln.Attributes[subscriber.AttrParkID])
		assert.NotEmpty(t, ln.Attributes[subscriber.AttrMessageID])
	}
	assert.Equal(t, []string{"acct-1/3", "acct-1/4", "acct-1/5"}, parked)
}

// decodeLines decodes replay's output, one JSON object a line, with no
// field it does not document.
func decodeLines(t *testing.T, out string) []line {
	t.Helper()
	var lines []line
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		dec := json.NewDecoder(strings.NewReader(sc.Text()))
		dec.DisallowUnknownFields()
		var ln line
		require.NoError(t, dec.Decode(&ln), sc.Text())
		lines = append(lines, ln)
	}
	return lines
}

// TestParkctlRefuses: what parkctl cannot do, it says, with a status that
// is not 0.
func TestParkctlRefuses(t *testing.T) {
	_, _, _, ctx := service(t)
	for _, tc := range []struct {
		name string
		args []string
		code int
		want string
	}{
		{"no command", nil, exitUsage, "usage:"},
		{"an unknown command", []string{"park"}, exitUsage, `unknown command "park"`},
		{"list without -sub", []string{"-parking", "ledger-parked", "list"}, exitUsage, "-sub is required"},
		{"release without a key", []string{"-sub", "ledger-balances", "-parking", "ledger-parked", "release"}, exitUsage, "release takes one key"},
		{"a parking topic that is not there", []string{"-sub", "ledger-balances", "-parking", "ledger-parkd", "list"}, exitFail, "no parking topic projects/keyorder-test/topics/ledger-parkd"},
		{"a subscription that is not there", []string{"-sub", "ledger-balance", "-parking", "ledger-parked", "list"}, exitFail, "no subscription projects/keyorder-test/subscriptions/ledger-balance: check -sub"},
		{"a key not parked", []string{"-sub", "ledger-balances", "-parking", "ledger-parked", "release", "-wait=false", "acct-9"}, exitFail, "key is not parked"},
		{"a topic without retention", []string{"replay", "-quiet", "100ms", "ledger"}, exitFail, "no message retention"},
		{"-from and -since", []string{"replay", "-from", "2026-01-01T00:00:00Z", "-since", "1h", "ledger"}, exitUsage, "not both"},
		{"-since 0s", []string{"replay", "-since", "0s", "ledger"}, exitUsage, "-since 0s: need a duration more than 0"},
		{"-since -5m", []string{"replay", "ledger", "-since", "-5m"}, exitUsage, "-since -5m0s: need a duration more than 0"},
		{"-timeout 0", []string{"release", "acct-1", "-timeout", "0", "-sub", "ledger-balances", "-parking", "ledger-parked"}, exitUsage, "-timeout 0s: need more than 0"},
		{"-timeout with -wait=false", []string{"release", "-wait=false", "-timeout", "1m", "acct-1"}, exitUsage, "nothing waits"},
		{"a flag of another command", []string{"release", "-json", "acct-1"}, exitUsage, "-json is not a flag of release"},
		{"an unknown flag", []string{"list", "-subscription", "x"}, exitUsage, "flag provided but not defined: -subscription"},
		{"list with an argument", []string{"list", "acct-1", "-sub", "ledger-balances", "-parking", "ledger-parked"}, exitUsage, "list takes no arguments"},
		{"withdraw of two keys", []string{"withdraw", "a", "b"}, exitUsage, "withdraw takes one key, not 2 arguments"},
		{"a wrong project", []string{"-project", "other", "-sub", "ledger-balances", "-parking", "ledger-parked", "list"}, exitFail,
			"no subscription projects/other/subscriptions/ledger-balances: check -sub, and the project (-project or GOOGLE_CLOUD_PROJECT)"},
		{"-parking naming the control topic", []string{"list", "-sub", "ledger-balances", "-parking", "ledger-balances-parking-control"}, exitFail,
			"is the subscription's control topic"},
		{"-parking naming the subscription's topic", []string{"list", "-sub", "ledger-balances", "-parking", "ledger"}, exitFail,
			"is the topic the subscription reads"},
		{"a replay of a missing topic", []string{"replay", "ledgr"}, exitFail, "no topic projects/keyorder-test/topics/ledgr"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, _, errOut := parkctl(ctx, tc.args...)
			assert.Equal(t, tc.code, code, errOut)
			assert.Contains(t, errOut, tc.want)
		})
	}
}

// TestParkctlFindsTheParkingTopic: without -parking, parkctl takes the
// parking topic the subscription's label records; a subscription no
// process has parked to records none, and parkctl says to give -parking.
func TestParkctlFindsTheParkingTopic(t *testing.T) {
	_, client, _, ctx := service(t)
	code, out, errOut := parkctl(ctx, "list", "-sub", "ledger-balances")
	assert.Equal(t, exitOK, code, errOut)
	assert.Contains(t, out+errOut, "no key of projects/keyorder-test/subscriptions/ledger-balances is parked")

	_, err := subscriber.CreateWithTopic(ctx, client, "ledger", "ledger-plain")
	require.NoError(t, err)
	code, _, errOut = parkctl(ctx, "list", "-sub", "ledger-plain")
	assert.Equal(t, exitFail, code)
	assert.Contains(t, errOut, "records no parking topic")
	assert.Contains(t, errOut, "give -parking")
}

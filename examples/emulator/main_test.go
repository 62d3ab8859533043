package main

import (
	"bufio"
	"context"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"cloud.google.com/go/pubsub/v2"
	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/keyorder/keyorder/internal/harness"
	"github.com/keyorder/keyorder/internal/leaktest"
)

func TestMain(m *testing.M) { leaktest.VerifyTestMain(m) }

// TestServes runs the program on a free port, connects to the address it
// prints, publishes and receives a message with an ordering key, and stops
// it as a signal would.
func TestServes(t *testing.T) {
	for _, tc := range []struct {
		name       string // the server the program names
		args       []string
		everywhere bool // listening on every interface
	}{
		{"pstest", []string{"-port=0"}, false},
		{"orderingtest", []string{"-port=0", "-fake"}, false},
		{"pstest", []string{"-port=0", "-host=0.0.0.0"}, true},
		{"orderingtest", []string{"-port=0", "-fake", "-host=0.0.0.0"}, true},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
			defer cancel()
			serveCtx, stop := context.WithCancel(ctx)
			defer stop()
			lines, done := start(t, serveCtx, tc.args)

			first := <-lines
			assert.True(t, strings.HasPrefix(first, tc.name+" serving on "), first)
			export := <-lines
			addr, ok := strings.CutPrefix(export, "export "+harness.EmulatorEnv+"=")
			require.True(t, ok, export)
			roundTrip(t, ctx, addr)
			serving, _, _ := strings.Cut(strings.TrimPrefix(first, tc.name+" serving on "), ";")
			listenHost, _, err := net.SplitHostPort(serving)
			require.NoError(t, err)
			dialHost, _, err := net.SplitHostPort(addr)
			require.NoError(t, err)
			if tc.everywhere {
				// It listens on every interface, and prints localhost to dial.
				assert.True(t, net.ParseIP(listenHost).IsUnspecified(), first)
				assert.Equal(t, "localhost", dialHost)
			} else {
				assert.True(t, net.ParseIP(listenHost).IsLoopback(), first)
				assert.Equal(t, listenHost, dialHost)
			}

			stop()
			require.NoError(t, <-done)
			assert.Equal(t, tc.name+" stopping", <-lines)
		})
	}
}

func TestPortTaken(t *testing.T) {
	lis, err := net.Listen("tcp", "localhost:0")
	require.NoError(t, err)
	defer lis.Close()
	_, port, err := net.SplitHostPort(lis.Addr().String())
	require.NoError(t, err)
	for _, args := range [][]string{{"-port=" + port}, {"-port=" + port, "-fake"}} {
		assert.Error(t, run(context.Background(), args, io.Discard), "%q", args)
	}
}

// start runs the program with args until ctx ends. It returns its output,
// a line at a time, and its result.
func start(t *testing.T, ctx context.Context, args []string) (<-chan string, <-chan error) {
	r, w := io.Pipe()
	lines := make(chan string, 10)
	done := make(chan error, 1)
	read := make(chan struct{})
	go func() {
		defer close(read)
		defer close(lines)
		for s := bufio.NewScanner(r); s.Scan(); {
			lines <- s.Text()
		}
	}()
	go func() {
		err := run(ctx, args, w)
		_ = w.Close()
		done <- err
	}()
	t.Cleanup(func() { <-read })
	return lines, done
}

// roundTrip publishes a keyed message through the server at addr and
// receives it back.
func roundTrip(t *testing.T, ctx context.Context, addr string) {
	client, err := harness.Connect(ctx, addr)
	require.NoError(t, err)
	defer client.Close()
	topic := "projects/" + harness.Project + "/topics/orders"
	sub := "projects/" + harness.Project + "/subscriptions/orders-sub"
	_, err = client.TopicAdminClient.CreateTopic(ctx, &pubsubpb.Topic{Name: topic})
	require.NoError(t, err)
	_, err = client.SubscriptionAdminClient.CreateSubscription(ctx, &pubsubpb.Subscription{
		Name: sub, Topic: topic, EnableMessageOrdering: true,
	})
	require.NoError(t, err)
	p := client.Publisher(topic)
	p.EnableMessageOrdering = true
	_, err = p.Publish(ctx, &pubsub.Message{Data: []byte("hello"), OrderingKey: "c-01"}).Get(ctx)
	p.Stop()
	require.NoError(t, err)

	rctx, got := context.WithCancel(ctx)
	defer got()
	var key string
	require.NoError(t, client.Subscriber(sub).Receive(rctx, func(_ context.Context, m *pubsub.Message) {
		m.Ack()
		key = m.OrderingKey
		got()
	}))
	assert.Equal(t, "c-01", key)
}

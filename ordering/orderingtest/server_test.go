package orderingtest_test

import (
	"context"
	"net"
	"runtime"
	"testing"
	"time"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/keyorder/keyorder/internal/harness"
	"github.com/keyorder/keyorder/ordering/orderingtest"
)

func TestNewValidatesOptions(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		opt  orderingtest.Option
		ok   bool
	}{
		{"ack deadline", orderingtest.WithAckDeadline(time.Millisecond), true},
		{"negative ack deadline", orderingtest.WithAckDeadline(-time.Second), false},
		{"ack deadline over 600 s", orderingtest.WithAckDeadline(601 * time.Second), false},
		{"response size", orderingtest.WithResponseSize(1), true},
		{"response size 0", orderingtest.WithResponseSize(0), false},
		{"response size over 1000", orderingtest.WithResponseSize(1001), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			srv, err := orderingtest.New(tc.opt)
			if !tc.ok {
				require.ErrorIs(t, err, orderingtest.ErrInvalidConfig)
				assert.Panics(t, func() { orderingtest.NewServer(tc.opt) })
				return
			}
			require.NoError(t, err)
			require.NoError(t, srv.Close())
		})
	}
}

// TestWithAddress: the server listens where it is told, serves there, and
// reports an address it cannot take.
func TestWithAddress(t *testing.T) {
	t.Parallel()
	srv, err := orderingtest.New(orderingtest.WithAddress("localhost:0"))
	require.NoError(t, err)
	defer srv.Close()
	host, port, err := net.SplitHostPort(srv.Addr)
	require.NoError(t, err)
	assert.NotEqual(t, "0", port, "Addr names the port picked")
	assert.True(t, net.ParseIP(host).IsLoopback(), "listening on %s", host)

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	client := harness.Client(t, srv.Addr)
	_, err = client.TopicAdminClient.CreateTopic(ctx, &pubsubpb.Topic{Name: topicName("topic")})
	require.NoError(t, err)

	_, err = orderingtest.New(orderingtest.WithAddress(srv.Addr))
	require.Error(t, err, "the port is taken")
}

// TestClose: Close ends open streams and held publishes, returns once the
// server's goroutines are gone (TestMain checks for leaks), and may be
// called again.
func TestClose(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	hold := f.srv.HoldPublish(orderingtest.AnyMessage)
	// A bare connection: the official client would retry Unavailable.
	conn, err := grpc.NewClient(f.srv.Addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	defer conn.Close()
	published := make(chan error, 1)
	go func() {
		_, err := pubsubpb.NewPublisherClient(conn).Publish(f.ctx, &pubsubpb.PublishRequest{
			Topic: f.topic, Messages: []*pubsubpb.PubsubMessage{{Data: []byte("x")}},
		})
		published <- err
	}()
	require.NoError(t, hold.Wait(f.ctx, 1))

	ctx, cancel := context.WithCancel(f.ctx)
	defer cancel()
	stream, err := pubsubpb.NewSubscriberClient(conn).StreamingPull(ctx)
	require.NoError(t, err)
	require.NoError(t, stream.Send(&pubsubpb.StreamingPullRequest{Subscription: f.sub, StreamAckDeadlineSeconds: 10}))
	f.waitFor("the stream", func() bool { return f.srv.Stats(f.sub).Streams == 1 })

	require.NoError(t, f.srv.Close())
	require.NoError(t, f.srv.Close())
	assert.Equal(t, codes.Unavailable, status.Code(recv(t, published, "the held publish")))
	_, err = stream.Recv()
	assert.Equal(t, codes.Unavailable, status.Code(err))
}

// TestStreamingPullHeartbeat: the server answers a client ping with a
// response that still reports the subscription's properties, which the
// official client re-reads from every response.
func TestStreamingPullHeartbeat(t *testing.T) {
	t.Parallel()
	_, client := harness.Fake(t)
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	_, err := client.TopicAdminClient.CreateTopic(ctx, &pubsubpb.Topic{Name: topicName("topic")})
	require.NoError(t, err)
	_, err = client.SubscriptionAdminClient.CreateSubscription(ctx, &pubsubpb.Subscription{
		Name: subName("sub"), Topic: topicName("topic"), EnableMessageOrdering: true,
	})
	require.NoError(t, err)
	stream, err := client.SubscriptionAdminClient.StreamingPull(ctx)
	require.NoError(t, err)
	require.NoError(t, stream.Send(&pubsubpb.StreamingPullRequest{Subscription: subName("sub"), StreamAckDeadlineSeconds: 10, ProtocolVersion: 1}))
	require.NoError(t, stream.Send(&pubsubpb.StreamingPullRequest{}))
	res, err := stream.Recv()
	require.NoError(t, err)
	assert.Empty(t, res.ReceivedMessages)
	assert.True(t, res.SubscriptionProperties.GetMessageOrderingEnabled())

	require.NoError(t, stream.Send(&pubsubpb.StreamingPullRequest{ModifyDeadlineAckIds: []string{"a"}}))
	_, err = stream.Recv()
	assert.Equal(t, codes.InvalidArgument, status.Code(err), "ack IDs and deadlines must pair up")
}

// fatalTB records a Fatal and ends the goroutine that called it, as
// testing.T does.
type fatalTB struct {
	testing.TB
	fatal []any
}

func (f *fatalTB) Helper() {}
func (f *fatalTB) Fatal(args ...any) {
	f.fatal = args
	runtime.Goexit()
}

// TestStart: a server started for a test serves, and is closed when the
// test ends; an invalid option fails the test.
func TestStart(t *testing.T) {
	t.Parallel()
	var srv *orderingtest.Server
	t.Run("serves", func(t *testing.T) {
		srv = orderingtest.Start(t)
		client, err := srv.Client(context.Background(), "any-project")
		require.NoError(t, err)
		defer client.Close()
		ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
		defer cancel()
		_, err = client.TopicAdminClient.CreateTopic(ctx, &pubsubpb.Topic{Name: "projects/any-project/topics/topic"})
		require.NoError(t, err)
	})
	lis, err := net.Listen("tcp", srv.Addr)
	require.NoError(t, err, "the server was closed when its test ended")
	require.NoError(t, lis.Close())

	bad := &fatalTB{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		orderingtest.Start(bad, orderingtest.WithResponseSize(0))
		t.Error("Start returned after an invalid option")
	}()
	recv(t, done, "Start to fail")
	require.Len(t, bad.fatal, 1)
	assert.ErrorIs(t, bad.fatal[0].(error), orderingtest.ErrInvalidConfig)
}

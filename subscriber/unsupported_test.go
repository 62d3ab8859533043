package subscriber_test

import (
	"context"
	"crypto/rand"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/api/option"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/keyorder/keyorder/internal/harness"
	"github.com/keyorder/keyorder/ordering/orderingtest"
	"github.com/keyorder/keyorder/subscriber"
)

// withoutSeek is a client option that answers every Seek with
// Unimplemented, as Google's emulator does on an ordered subscription.
var withoutSeek = option.WithGRPCDialOption(grpc.WithChainUnaryInterceptor(
	func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		if method == "/google.pubsub.v1.Subscriber/Seek" {
			return status.Error(codes.Unimplemented, "Unimplemented")
		}
		return invoker(ctx, method, req, reply, cc, opts...)
	}))

// TestParkingNamesAMissingSeek: on a server without Seek, CreateWithTopic
// and Open with parking fail at once with an *UnsupportedError that names
// the call and the fix, instead of the first Receive failing with a bare
// Unimplemented.
func TestParkingNamesAMissingSeek(t *testing.T) {
	t.Parallel()
	srv := orderingtest.Start(t)
	client := harness.Client(t, srv.Addr, withoutSeek)
	topic, sub := names()
	_, err := subscriber.CreateWithTopic(testContext(t), client, topic, sub, subscriber.WithParking("parked-"+topic))
	assertUnsupported(t, err, "Seek")

	_, err = subscriber.CreateWithTopic(testContext(t), client, topic, sub)
	require.NoError(t, err, "without parking, Seek is not needed")
	_, err = subscriber.Open(testContext(t), client, sub, subscriber.WithParking("parked-"+topic))
	assertUnsupported(t, err, "Seek")
}

func assertUnsupported(t *testing.T, err error, call string) {
	t.Helper()
	require.ErrorIs(t, err, subscriber.ErrUnsupported)
	var u *subscriber.UnsupportedError
	require.True(t, errors.As(err, &u))
	assert.Contains(t, u.Call, call)
	assert.Equal(t, codes.Unimplemented, status.Code(u.Err))
	assert.Contains(t, err.Error(), "go run ./examples/emulator -fake", "names the fix")
}

// TestGoogleEmulatorParking: on Google's emulator, which refuses Seek to a
// time on an ordered subscription, CreateWithTopic with parking names the
// missing call. It skips where no emulator runs (KEYORDER_GOOGLE_EMULATOR).
func TestGoogleEmulatorParking(t *testing.T) {
	t.Parallel()
	client := harness.Client(t, harness.GoogleEmulator(t))
	// The emulator outlives the test: names of this run only.
	id := "emu-" + rand.Text()[:10]
	_, err := subscriber.CreateWithTopic(testContext(t), client, id, id, subscriber.WithParking(id+"-parked"))
	assertUnsupported(t, err, "Seek")
}

// TestReplayNamesAMissingSeek: Replay on a server without Seek names the
// missing call.
func TestReplayNamesAMissingSeek(t *testing.T) {
	t.Parallel()
	srv := orderingtest.Start(t)
	client := harness.Client(t, srv.Addr, withoutSeek)
	topic, _ := names()
	_, err := subscriber.CreateWithTopic(testContext(t), client, topic, "s-"+topic, subscriber.WithTopicRetention(time.Hour))
	require.NoError(t, err)
	err = subscriber.Replay(testContext(t), client, topic, time.Now().Add(-time.Minute), func(context.Context, *subscriber.Delivery) error { return nil })
	assertUnsupported(t, err, "Seek")
}

package main

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/api/option"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/keyorder/keyorder/internal/harness"
	"github.com/keyorder/keyorder/internal/leaktest"
	"github.com/keyorder/keyorder/ordering/orderingtest"
)

func TestMain(m *testing.M) { leaktest.VerifyTestMain(m) }

// TestRun runs what `go run ./examples/parking` runs, on its embedded fake:
// run fails if any account's events ran out of order, twice or not at all.
func TestRun(t *testing.T) {
	t.Setenv(harness.EmulatorEnv, "") // not the developer's emulator
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var out bytes.Buffer
	require.NoError(t, run(ctx, &out), out.String())
	for _, want := range []string{
		"parked: acct-2, 4 events, because: permanent: unreadable amount \"thirty\" in event 3",
		"acct-2: events 1 2, balance 30",
		"6 events parked",
		"acct-2: events 1 2 3 4 5 6 7 8 9, balance 450",
		"acct-1: events 1 2 3 4 5 6, balance 210",
		"order check: 3 keys (0 violating order), 21 records: 0 out of order, 0 missing, 0 unexpected, 0 duplicates",
		"nothing is parked",
	} {
		assert.Contains(t, out.String(), want)
	}
}

// TestReceiveFails: when Receive fails, here because the server refuses
// every stream, the demonstration stops at once with Receive's error,
// instead of waiting out its deadline.
func TestReceiveFails(t *testing.T) {
	srv := orderingtest.Start(t)
	refuse := grpc.WithChainStreamInterceptor(func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
		return nil, status.Error(codes.PermissionDenied, "no streams today")
	})
	client := harness.Client(t, srv.Addr, option.WithGRPCDialOption(refuse))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	began := time.Now()
	var out bytes.Buffer
	err := demo(ctx, client, &out)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "receive:")
	assert.Contains(t, err.Error(), "no streams today")
	assert.Less(t, time.Since(began), 30*time.Second, "it did not wait for its deadline")
}

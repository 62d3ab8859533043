package orderingtest

import (
	"context"
	"fmt"

	"cloud.google.com/go/pubsub/v2"
	"google.golang.org/api/option"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// ClientOptions returns the options that point a Google Cloud client at the
// server: its address, dialled without TLS or credentials, as the official
// client dials an emulator named by PUBSUB_EMULATOR_HOST. Use them with
// pubsub.NewClient, or with any constructor that takes client options.
func (s *Server) ClientOptions() []option.ClientOption {
	return []option.ClientOption{
		option.WithEndpoint(s.Addr),
		option.WithoutAuthentication(),
		option.WithGRPCDialOption(grpc.WithTransportCredentials(insecure.NewCredentials())),
		option.WithTelemetryDisabled(),
	}
}

// Client returns an official client of project connected to the server.
// opts are applied after ClientOptions, so they may add to them, for
// example gRPC interceptors. The server accepts any project ID. Close the
// client when done; closing the server first makes its calls fail with
// Unavailable.
func (s *Server) Client(ctx context.Context, project string, opts ...option.ClientOption) (*pubsub.Client, error) {
	c, err := pubsub.NewClient(ctx, project, append(s.ClientOptions(), opts...)...)
	if err != nil {
		return nil, fmt.Errorf("orderingtest: client for %s: %w", s.Addr, err)
	}
	return c, nil
}

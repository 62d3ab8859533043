package subscriber_test

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"google.golang.org/grpc"
)

// A gate holds back, while shut, what the server sends on a client's
// streams from the subscriptions keyorder reads the parking control log
// through: that client's view of the log lags, as a slow connection's
// would, while everything else flows.
type gate struct {
	mu   sync.Mutex
	open chan struct{} // closed while the gate is open
}

func newGate() *gate {
	g := &gate{open: make(chan struct{})}
	close(g.open)
	return g
}

// shut holds back what arrives from now on.
func (g *gate) shut() {
	g.mu.Lock()
	defer g.mu.Unlock()
	select {
	case <-g.open:
		g.open = make(chan struct{})
	default:
	}
}

// lift lets everything through again.
func (g *gate) lift() {
	g.mu.Lock()
	defer g.mu.Unlock()
	select {
	case <-g.open:
	default:
		close(g.open)
	}
}

func (g *gate) wait(ctx context.Context) {
	g.mu.Lock()
	open := g.open
	g.mu.Unlock()
	select {
	case <-open:
	case <-ctx.Done():
	}
}

// interceptor gates the StreamingPull streams of control-log followers.
func (g *gate) interceptor() grpc.StreamClientInterceptor {
	return func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
		cs, err := streamer(ctx, desc, cc, method, opts...)
		if err != nil || !strings.HasSuffix(method, "/StreamingPull") {
			return cs, err
		}
		return &gatedStream{ClientStream: cs, g: g}, nil
	}
}

type gatedStream struct {
	grpc.ClientStream
	g        *gate
	follower atomic.Bool // set once the stream names a follower's subscription
}

func (s *gatedStream) SendMsg(m any) error {
	if req, ok := m.(*pubsubpb.StreamingPullRequest); ok && strings.Contains(req.GetSubscription(), "-parking-") {
		s.follower.Store(true)
	}
	return s.ClientStream.SendMsg(m)
}

func (s *gatedStream) RecvMsg(m any) error {
	err := s.ClientStream.RecvMsg(m)
	if err == nil && s.follower.Load() {
		s.g.wait(s.Context())
	}
	return err
}

package harness

import (
	"fmt"
	"net"
	"sync"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"cloud.google.com/go/pubsub/v2/pstest"
	"google.golang.org/grpc"
)

// maxMessageBytes is the most a Pub/Sub request or response may carry
// here: the service's 10 MB publish limit, with room for framing.
const maxMessageBytes = 20 << 20

// PstestServer is a pstest server that takes messages up to the service's
// 10 MB limit.
//
// pstest serves on a gRPC server with gRPC's default 4 MiB receive limit,
// which it gives no option to raise: a larger publish fails with
// ResourceExhausted, and the official client retries it for 60 s. It
// serves the same fake, pstest's exported GServer, from a gRPC server of
// its own with the limit raised, at Addr. The pstest server's own address
// is not meant to be dialled.
type PstestServer struct {
	*pstest.Server        // the fake: Messages, Publish, reactors and so on
	Addr           string // where to connect; shadows the pstest server's own
	gsrv           *grpc.Server
	serving        sync.WaitGroup
}

// StartPstest starts a pstest server, with reactors opts, reachable at addr
// ("host:port"; port 0 picks a free one).
func StartPstest(addr string, opts ...pstest.ServerReactorOption) (*PstestServer, error) {
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("harness: listen for pstest: %w", err)
	}
	fake := pstest.NewServer(opts...)
	p := &PstestServer{
		Server: fake,
		Addr:   lis.Addr().String(),
		gsrv:   grpc.NewServer(grpc.MaxRecvMsgSize(maxMessageBytes), grpc.MaxSendMsgSize(maxMessageBytes)),
	}
	pubsubpb.RegisterPublisherServer(p.gsrv, &fake.GServer)
	pubsubpb.RegisterSubscriberServer(p.gsrv, &fake.GServer)
	pubsubpb.RegisterSchemaServiceServer(p.gsrv, &fake.GServer)
	p.serving.Add(1)
	go func() {
		defer p.serving.Done()
		_ = p.gsrv.Serve(lis) // returns once Close stops it
	}()
	return p, nil
}

// Close stops both gRPC servers and waits for them.
func (p *PstestServer) Close() error {
	p.gsrv.Stop()
	p.serving.Wait()
	return p.Server.Close()
}

package publisher

import (
	"context"
	"encoding/base64"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"time"

	"cloud.google.com/go/pubsub/v2"
	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"github.com/googleapis/gax-go/v2"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	_ "google.golang.org/grpc/encoding/gzip" // registers the compressor WithPublishSettings may ask for
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// The service's limits on one Publish request (P6): 1,000 messages and
// 10 MB, the topic's name included.
const maxRequestCount = pubsub.MaxPublishRequestCount

// streamsPerConn is how many requests in flight the publisher allows per
// connection of the client's pool, by default: the concurrent streams
// Google's front ends take on one HTTP/2 connection. More would wait in
// the connection rather than on the service.
const streamsPerConn = 100

// maxSendBytes is the largest request gRPC may send, as the official
// client sets it: above the service's 10 MB, which the batches keep to.
const maxSendBytes = 20 << 20

// telemetryHeader is the metadata the official client sends with each
// Publish: when the publish began, for the service's own latency figures.
const telemetryHeader = "x-goog-pubsub-client-telemetry"

// defaultInFlight is the bound on requests in flight without NumGoroutines:
// streamsPerConn for each connection the client dials, which is
// GOMAXPROCS, at most 4, as cloud.google.com/go/pubsub/v2 sizes its pool.
func defaultInFlight() int {
	return streamsPerConn * min(runtime.GOMAXPROCS(0), 4)
}

// runQueue holds the queues ready to send, in the order they became so,
// and the senders that send them: goroutines, at most max, each taking a
// queue, sending one request of it and settling it, then the next queue,
// until none is ready. A key with more gathered meanwhile goes to the
// back, so that hot keys take turns with the others. A sender is started
// when a queue becomes ready and fewer than max run; Close waits for them
// through the Publisher's senders group.
type runQueue struct {
	p       *Publisher
	mu      sync.Mutex
	keys    []*keyQueue // ready, from head; guarded by mu
	head    int         // guarded by mu
	running int         // senders running; guarded by mu
	max     int
}

// push adds q, just made ready, and starts a sender if there is room for
// one. q's shard mutex is held; closeMu is held for reading, or a sender
// runs (see Publisher.senders).
func (rq *runQueue) push(q *keyQueue) {
	rq.mu.Lock()
	defer rq.mu.Unlock()
	rq.keys = append(rq.keys, q)
	if rq.running < rq.max {
		rq.running++
		rq.p.senders.Add(1)
		go rq.p.sendLoop()
	}
}

// pop takes the next ready queue, or, if none is, counts the caller's
// sender out and returns nil.
func (rq *runQueue) pop() *keyQueue {
	rq.mu.Lock()
	defer rq.mu.Unlock()
	if rq.head == len(rq.keys) {
		rq.running--
		// Start again at the front; give back a burst's array (P7).
		if cap(rq.keys) > 1024 {
			rq.keys = nil
		} else {
			rq.keys = rq.keys[:0]
		}
		rq.head = 0
		return nil
	}
	q := rq.keys[rq.head]
	rq.keys[rq.head] = nil
	rq.head++
	return q
}

// sendLoop is a sender: it sends ready queues until none is left.
func (p *Publisher) sendLoop() {
	defer p.senders.Done()
	for q := p.run.pop(); q != nil; q = p.run.pop() {
		p.sendNext(q)
	}
}

// sendNext sends the next batch of q, which is ready, and settles it.
func (p *Publisher) sendNext(q *keyQueue) {
	sh := q.sh
	sh.mu.Lock()
	q.state = idle
	batch := p.take(q)
	if q.unordered && len(q.pending) > 0 {
		// Unordered requests go in parallel.
		p.makeReady(q)
	}
	sh.mu.Unlock()
	ids, err := p.publish(batch)
	now := p.rec.now()
	sh.mu.Lock()
	p.settle(q, batch, ids, err, now)
	sh.mu.Unlock()
}

// publish sends batch, the messages of one key, or unordered ones, in one
// Publish request, as the official client does: on the client's own
// TopicAdminClient, hence its connections, credentials, endpoint and
// PUBSUB_EMULATOR_HOST; with the client's retry settings (apiv1's
// defaults: Aborted, Canceled, Internal, ResourceExhausted, Unknown,
// Unavailable and DeadlineExceeded, backing off from 100 ms to 60 s),
// except for Internal "invalid UTF-8", which would fail again; within the
// publish Timeout; compressed with gzip above CompressionBytesThreshold
// when EnableCompression asks; and with the client's telemetry header.
// The request is encoded by requestCodec.
func (p *Publisher) publish(batch []*Result) ([]string, error) {
	ctx := context.Background()
	if p.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, p.timeout)
		defer cancel()
	}
	msgs := make([]*pubsubpb.PubsubMessage, len(batch))
	size := 0
	for i, r := range batch {
		msgs[i] = &r.msg
		size += int(r.size)
	}
	opts := p.callOpts
	if p.compressAbove >= 0 && size > p.compressAbove {
		opts = p.compressedOpts
	}
	ctx = metadata.AppendToOutgoingContext(ctx, telemetryHeader, encodeTelemetry(time.Now()))
	res, err := p.client.TopicAdminClient.Publish(ctx, &pubsubpb.PublishRequest{Topic: p.topic, Messages: msgs}, opts...)
	if err != nil {
		return nil, err
	}
	if len(res.MessageIds) != len(batch) {
		return nil, status.Errorf(codes.Internal, "keyorder/publisher: %d message IDs for %d messages", len(res.MessageIds), len(batch))
	}
	return res.MessageIds, nil
}

// callOptions returns the call options of a Publish request on client,
// without and with compression.
func callOptions(client *pubsub.Client) (plain, compressed []gax.CallOption) {
	var cs gax.CallSettings
	for _, o := range client.TopicAdminClient.CallOptions.Publish {
		o.Resolve(&cs)
	}
	plain = []gax.CallOption{gax.WithGRPCOptions(grpc.MaxCallSendMsgSize(maxSendBytes), grpc.ForceCodecV2(newRequestCodec()))}
	if retry := cs.Retry; retry != nil {
		plain = append(plain, gax.WithRetry(func() gax.Retryer { return &publishRetryer{next: retry()} }))
	}
	compressed = append(plain[:len(plain):len(plain)], gax.WithGRPCOptions(grpc.UseCompressor("gzip")))
	return plain, compressed
}

// publishRetryer is the client's retryer, less Internal "invalid UTF-8",
// which the service answers for a message it will never take (as the
// official client does).
type publishRetryer struct{ next gax.Retryer }

func (r *publishRetryer) Retry(err error) (time.Duration, bool) {
	if r.next == nil {
		return 0, false
	}
	if s, ok := status.FromError(err); ok && s.Code() == codes.Internal && strings.Contains(s.Message(), "string field contains invalid UTF-8") {
		return 0, false
	}
	return r.next.Retry(err)
}

// encodeTelemetry encodes the telemetry header of a publish begun at start.
func encodeTelemetry(start time.Time) string {
	b, err := proto.Marshal(&pubsubpb.PubsubClientTelemetry{
		Operation: &pubsubpb.PubsubClientTelemetry_PublishOperation_{
			PublishOperation: &pubsubpb.PubsubClientTelemetry_PublishOperation{
				PublishStartTime: timestamppb.New(start),
			},
		},
	})
	if err != nil {
		panic(fmt.Sprintf("keyorder/publisher: telemetry: %v", err)) // a fixed message cannot fail to encode
	}
	return base64.StdEncoding.EncodeToString(b)
}

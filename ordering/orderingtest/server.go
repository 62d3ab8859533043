package orderingtest

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// maxRecvBytes lets requests over the service's 10 MB limit reach the
// validation that rejects them the way the service does, instead of failing
// in the transport.
const maxRecvBytes = 20 << 20

// Server is an in-process Pub/Sub server, on a free loopback port unless
// WithAddress says otherwise. Clients dial Addr without TLS or credentials,
// as an emulator: Client and ClientOptions do that for the official one.
// Close it when done; Start does that at the end of a test. All its
// methods are safe for concurrent use, and they may be called after Close,
// when they report the state the server was left in.
type Server struct {
	// Addr is the "host:port" the server listens on.
	Addr string

	cfg       config
	grpc      *grpc.Server
	wg        sync.WaitGroup // the serve loop, the timer loop and stream readers; Close waits
	done      chan struct{}  // closed by Close: stops senders, Pull and held Publish calls
	closeOnce sync.Once

	mu         sync.Mutex // guards everything below, and every topic, subscription and stream
	closed     bool
	topics     map[string]*topic
	subs       map[string]*subscription
	leases     leaseHeap   // every outstanding lease, earliest deadline first
	delays     delayHeap   // deliveries waiting to be due, earliest first (delay.go)
	timer      *time.Timer // fires at the earliest deadline or delay; read by runTimers
	armed      time.Time   // when timer is set to fire; zero when not set
	nextDelay  int64       // last delayed action's seq
	nextSerial int64       // last message serial handed out
	nextSub    int64
	nextStream int64
	nextAck    int64
	log        []Delivery
	faults     []*Fault
	changed    chan struct{} // closed on the next state change; made by WaitFor
	pushClient *http.Client  // what pushers send with; made with the first push subscription

	signer signer // the key push tokens are signed with; guarded by its own lock
}

// New starts a server on a free port of 127.0.0.1, or where WithAddress
// says. It returns an error for an invalid option or if it cannot listen.
func New(opts ...Option) (*Server, error) {
	cfg := defaultConfig()
	for _, opt := range opts {
		opt(&cfg)
	}
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	lis, err := net.Listen("tcp", cfg.addr)
	if err != nil {
		return nil, fmt.Errorf("orderingtest: listen: %w", err)
	}
	s := &Server{
		Addr:   lis.Addr().String(),
		cfg:    cfg,
		done:   make(chan struct{}),
		topics: map[string]*topic{},
		subs:   map[string]*subscription{},
		timer:  time.NewTimer(time.Hour),
		// WaitForHandlers makes Stop wait for every RPC handler, so Close
		// returns only after every stream's sender has exited.
		grpc: grpc.NewServer(grpc.MaxRecvMsgSize(maxRecvBytes), grpc.WaitForHandlers(true)),
	}
	s.timer.Stop()
	pubsubpb.RegisterPublisherServer(s.grpc, publisherService{s: s})
	pubsubpb.RegisterSubscriberServer(s.grpc, subscriberService{s: s})
	s.wg.Add(2)
	go func() {
		defer s.wg.Done()
		_ = s.grpc.Serve(lis) // returns once Close stops the server
	}()
	go s.runTimers()
	return s, nil
}

// NewServer is New for tests: it panics where New returns an error, as
// pstest.NewServer does.
func NewServer(opts ...Option) *Server {
	s, err := New(opts...)
	if err != nil {
		panic(err)
	}
	return s
}

// Start starts a server for the length of a test or benchmark: it fails
// tb at once if New fails, and closes the server when tb ends, after the
// cleanups registered later (so a client made afterwards and closed with
// tb.Cleanup closes first).
func Start(tb testing.TB, opts ...Option) *Server {
	tb.Helper()
	s, err := New(opts...)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = s.Close() })
	return s
}

// Close stops the server: open streams end with Unavailable, held Publish
// calls fail, push requests in flight are cancelled, and Close returns once
// every goroutine the server started has exited. It is idempotent and
// always returns nil.
func (s *Server) Close() error {
	s.closeOnce.Do(func() {
		s.mu.Lock()
		s.closed = true
		close(s.done)
		for _, sub := range s.subs {
			sub.stopPush()
		}
		s.mu.Unlock()
		s.grpc.Stop()
		s.wg.Wait()
		s.timer.Stop()
		if s.pushClient != nil {
			// No pusher is left to use it: let its connections go.
			s.pushClient.CloseIdleConnections()
		}
	})
	return nil
}

// publisherService implements the Publisher service; see publisher.go.
type publisherService struct {
	pubsubpb.UnimplementedPublisherServer
	s *Server
}

// subscriberService implements the Subscriber service; see subscriber.go.
type subscriberService struct {
	pubsubpb.UnimplementedSubscriberServer
	s *Server
}

func (s *Server) subscriptionLocked(name string) (*subscription, error) {
	return lookupLocked(s, s.subs, subscriptionName, name, "subscription")
}

func (s *Server) topicLocked(name string) (*topic, error) {
	return lookupLocked(s, s.topics, topicName, name, "topic")
}

// lookupLocked finds the resource name names in m, or returns the status
// the service would: InvalidArgument for a malformed name, NotFound for a
// missing resource.
func lookupLocked[T any](s *Server, m map[string]*T, re *regexp.Regexp, name, what string) (*T, error) {
	if s.closed {
		return nil, status.Error(codes.Unavailable, "orderingtest: server closed")
	}
	if err := checkName(re, name, what); err != nil {
		return nil, err
	}
	v := m[name]
	if v == nil {
		return nil, status.Errorf(codes.NotFound, "orderingtest: %s %s not found", what, name)
	}
	return v, nil
}

// changedLocked wakes WaitFor callers. It costs nothing when none wait.
func (s *Server) changedLocked() {
	if s.changed != nil {
		close(s.changed)
		s.changed = nil
	}
}

// WaitFor blocks until cond returns true, re-evaluating it after every
// change of the server's state (a publish, a delivery, an ack, a fault
// firing...). It returns ctx.Err() if ctx ends first. cond runs without the
// server's lock, so it may call the server's methods.
func (s *Server) WaitFor(ctx context.Context, cond func() bool) error {
	for {
		s.mu.Lock()
		if s.changed == nil {
			s.changed = make(chan struct{})
		}
		ch := s.changed
		s.mu.Unlock()
		if cond() {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// page returns the page of items a list request asks for. The page token is
// the offset of the page's first item.
func page[T any](items []T, size int32, token string) ([]T, string, error) {
	start := 0
	if token != "" {
		if _, err := fmt.Sscanf(token, "%d", &start); err != nil || start < 0 || start > len(items) {
			return nil, "", invalid("invalid page token %q", token)
		}
	}
	end := len(items)
	if size > 0 && start+int(size) < end {
		end = start + int(size)
	}
	next := ""
	if end < len(items) {
		next = fmt.Sprint(end)
	}
	return items[start:end], next, nil
}

// named is a topic or subscription proto.
type named interface {
	proto.Message
	GetName() string
}

// protoPage returns copies of the page of the resources of project that a
// list request asks for, sorted by name.
func protoPage[T named](all []T, project string, size int32, token string) ([]T, string, error) {
	if !projectName.MatchString(project) {
		return nil, "", invalid("invalid project %q", project)
	}
	var mine []T
	for _, p := range all {
		if strings.HasPrefix(p.GetName(), project+"/") {
			mine = append(mine, p)
		}
	}
	slices.SortFunc(mine, func(a, b T) int { return strings.Compare(a.GetName(), b.GetName()) })
	got, next, err := page(mine, size, token)
	if err != nil {
		return nil, "", err
	}
	out := make([]T, len(got))
	for i, p := range got {
		out[i] = proto.Clone(p).(T)
	}
	return out, next, nil
}

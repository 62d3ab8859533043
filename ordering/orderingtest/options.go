package orderingtest

import (
	"fmt"
	"net/http"
	"time"
)

// maxAckDeadline is the longest ack deadline the service grants: 600 s.
const maxAckDeadline = 600 * time.Second

// maxLatency bounds WithLatency: beyond a minute a test is not a test.
const maxLatency = time.Minute

// config holds the settings New validates once.
type config struct {
	addr         string        // where to listen
	ackDeadline  time.Duration // 0: honour the deadlines clients ask for
	responseSize int           // messages per StreamingPull response, at most
	latency      time.Duration // added to each publish and each delivery
	pushClient   *http.Client  // nil: a client of the server's own
	// emulatorRedelivery: redeliver as Google's emulator does (redelivery.go)
	emulatorRedelivery bool
}

// DefaultAddress is where a Server listens unless WithAddress says
// otherwise: a free port on the IPv4 loopback.
const DefaultAddress = "127.0.0.1:0"

func defaultConfig() config {
	return config{addr: DefaultAddress, responseSize: 1000}
}

func (c config) validate() error {
	if c.ackDeadline < 0 || c.ackDeadline > maxAckDeadline {
		return fmt.Errorf("%w: ack deadline %v outside [0, %v]", ErrInvalidConfig, c.ackDeadline, maxAckDeadline)
	}
	if c.latency < 0 || c.latency > maxLatency {
		return fmt.Errorf("%w: latency %v outside [0, %v]", ErrInvalidConfig, c.latency, maxLatency)
	}
	if c.responseSize < 1 || c.responseSize > 1000 {
		return fmt.Errorf("%w: response size %d outside [1, 1000]", ErrInvalidConfig, c.responseSize)
	}
	return nil
}

// An Option configures a Server. Options are validated once, by New.
type Option func(*config)

// WithAddress makes the server listen on addr, a "host:port" as net.Listen
// takes it, instead of [DefaultAddress]. A standalone emulator uses it to
// serve on a known port (gcloud's emulator uses 8085); port 0 picks a free
// one, and Server.Addr tells which. New fails if it cannot listen there.
func WithAddress(addr string) Option {
	return func(c *config) { c.addr = addr }
}

// WithAckDeadline makes every lease the server grants last d: the first
// lease of a delivery and each extension by a non-zero ModifyAckDeadline,
// whatever the subscription, the stream or the request asks for. It shrinks
// time for tests of deadline expiry: the service never grants less than
// 10 s, and the official client extends leases every few seconds, so with
// d of a few hundred milliseconds a message that is neither acked nor
// nacked comes back within well under a second.
//
// The default, 0, honours the requested deadlines as the service does: the
// stream's StreamAckDeadlineSeconds (clamped to [10 s, 600 s]) for
// StreamingPull, the subscription's ack deadline for Pull, and each
// ModifyAckDeadline's seconds. d must be in [0, 600 s].
func WithAckDeadline(d time.Duration) Option {
	return func(c *config) { c.ackDeadline = d }
}

// WithResponseSize caps the number of messages the server puts in one
// StreamingPull response. Smaller responses interleave streams and keys more
// finely. The default is 1000; n must be in [1, 1000].
func WithResponseSize(n int) Option {
	return func(c *config) { c.responseSize = n }
}

// WithLatency makes the server as slow as the service is far: each Publish
// answers d after it arrives, and each message reaches a StreamingPull
// stream or a Pull response d after it became deliverable (published,
// nacked, expired, sought back or sent again with its key's tail). A
// published message becomes deliverable when its Publish answers, so a
// publish-to-handler round trip takes at least 2d, as a publish and a
// delivery each take a trip on the service.
//
// Latency delays; it does not serialise: messages in flight at the same
// time each wait about d, and throughput holds as long as the client keeps
// enough in flight (per ordering key, the official publisher sends one
// request at a time, as it does to the service). Ack, ModifyAckDeadline
// and the admin calls are not delayed: their effects apply at once, and a
// nacked message's redelivery is what takes d.
//
// The default, 0, adds nothing, and costs nothing. d must be in [0, 1 min].
func WithLatency(d time.Duration) Option {
	return func(c *config) { c.latency = d }
}

// WithPushClient makes the server send push requests with a copy of c,
// which never follows redirects (the service counts a redirect as a
// failure). Use it for endpoints served with TLS: an httptest.NewTLSServer's
// Client() trusts the test's certificate. Close closes the copy's idle
// connections, which are c's transport's. By default the server pushes
// with a client of its own, which trusts the system's roots.
func WithPushClient(c *http.Client) Option {
	return func(cfg *config) { cfg.pushClient = c }
}

// Package harness connects keyorder's tests and examples to an in-process
// Pub/Sub server: pstest, ordering/orderingtest, or whatever server
// PUBSUB_EMULATOR_HOST names.
package harness

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"cloud.google.com/go/pubsub/v2"
	"cloud.google.com/go/pubsub/v2/pstest"
	"google.golang.org/api/option"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/keyorder/keyorder/ordering/orderingtest"
)

// Project is the project ID tests and examples use. Fake servers accept any.
const Project = "keyorder-test"

// Connect returns a client for the Pub/Sub server at addr, dialled without
// TLS or credentials as an emulator is. opts are applied after those, so a
// test can add interceptors with option.WithGRPCDialOption.
func Connect(ctx context.Context, addr string, opts ...option.ClientOption) (*pubsub.Client, error) {
	return ConnectProject(ctx, addr, Project, opts...)
}

// Client connects to addr for the length of a test: the client is closed
// when the test ends.
func Client(t testing.TB, addr string, opts ...option.ClientOption) *pubsub.Client {
	t.Helper()
	c, err := Connect(context.Background(), addr, opts...)
	if err != nil {
		t.Fatalf("harness: connect to %s: %v", addr, err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// Context returns a context that ends after d or when the test ends,
// whichever comes first: the bound on every wait in a test.
func Context(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// Pstest starts a pstest server with the given reactors for the length of a
// test and returns it with a connected client. The server takes messages
// up to the service's limit (see [PstestServer]). The client is closed before the
// server.
func Pstest(t testing.TB, opts ...pstest.ServerReactorOption) (*pstest.Server, *pubsub.Client) {
	t.Helper()
	srv, err := StartPstest("127.0.0.1:0", opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Close() })
	return srv.Server, Client(t, srv.Addr)
}

// EmulatorEnv names the variable that points the official client, and
// keyorder's examples, at an emulator instead of Google Cloud.
const EmulatorEnv = "PUBSUB_EMULATOR_HOST"

// ProjectEnv names the variable that sets the examples' project, as it
// does the official client's on Google Cloud.
const ProjectEnv = "GOOGLE_CLOUD_PROJECT"

// ExampleProject returns the project the examples use: the one
// GOOGLE_CLOUD_PROJECT names, or Project when it is unset.
func ExampleProject() string {
	if p := os.Getenv(ProjectEnv); p != "" {
		return p
	}
	return Project
}

// ConnectProject is Connect for a client of project.
func ConnectProject(ctx context.Context, addr, project string, opts ...option.ClientOption) (*pubsub.Client, error) {
	base := []option.ClientOption{
		option.WithEndpoint(addr),
		option.WithoutAuthentication(),
		option.WithGRPCDialOption(grpc.WithTransportCredentials(insecure.NewCredentials())),
		option.WithTelemetryDisabled(),
	}
	return pubsub.NewClient(ctx, project, append(base, opts...)...)
}

// Open is how every example connects: to the server that
// PUBSUB_EMULATOR_HOST names or, when it is unset, to an embedded pstest
// server started for the purpose, with a client of ExampleProject. It
// returns the client, a description of the server for messages, and a
// function that closes the client and any server Open started.
func Open(ctx context.Context) (c *pubsub.Client, where string, closeAll func(), err error) {
	if addr := os.Getenv(EmulatorEnv); addr != "" {
		c, err := ConnectProject(ctx, addr, ExampleProject())
		if err != nil {
			return nil, "", nil, err
		}
		return c, "emulator at " + addr, func() { _ = c.Close() }, nil
	}
	srv, err := StartPstest("127.0.0.1:0")
	if err != nil {
		return nil, "", nil, err
	}
	return connectEmbedded(ctx, srv.Addr, "embedded pstest", srv.Close)
}

// connectEmbedded connects to an embedded server at addr, described as
// what, that closeServer stops; the server is stopped if the connection
// fails, and with the client by the returned closeAll.
func connectEmbedded(ctx context.Context, addr, what string, closeServer func() error) (*pubsub.Client, string, func(), error) {
	c, err := ConnectProject(ctx, addr, ExampleProject())
	if err != nil {
		_ = closeServer()
		return nil, "", nil, err
	}
	return c, what + " at " + addr, func() { _ = c.Close(); _ = closeServer() }, nil
}

// OpenFake is Open with an embedded ordering/orderingtest server instead
// of pstest, for an example that needs what pstest lacks: Seek to a time
// on an ordered subscription, and ordering as the service keeps it.
func OpenFake(ctx context.Context) (c *pubsub.Client, where string, closeAll func(), err error) {
	if os.Getenv(EmulatorEnv) != "" {
		return Open(ctx)
	}
	srv, err := orderingtest.New()
	if err != nil {
		return nil, "", nil, err
	}
	return connectEmbedded(ctx, srv.Addr, "embedded ordering-faithful fake", srv.Close)
}

// EmbeddedOnly returns an error that says why the example what runs on
// its embedded fake only, because of why, when PUBSUB_EMULATOR_HOST is
// set; nil when it is not. An example that cannot run on another server
// says so rather than ignore the variable.
func EmbeddedOnly(what, why string) error {
	if addr := os.Getenv(EmulatorEnv); addr != "" {
		return fmt.Errorf("%s runs on its embedded fake only, which %s; unset %s (it names %s)", what, why, EmulatorEnv, addr)
	}
	return nil
}

// GoogleEmulatorEnv names the variable that tells tests where Google's
// Pub/Sub emulator listens, "host:port"; .ci/run sets it when it starts
// one.
const GoogleEmulatorEnv = "KEYORDER_GOOGLE_EMULATOR"

// GoogleEmulator returns the address of Google's Pub/Sub emulator for a
// test that needs it, and skips the test, saying how to run it, when
// there is none.
func GoogleEmulator(t testing.TB) string {
	t.Helper()
	addr := os.Getenv(GoogleEmulatorEnv)
	if addr == "" {
		t.Skipf("no Google Pub/Sub emulator: set %s=HOST:PORT to one started with gcloud beta emulators pubsub start --host-port=HOST:PORT; .ci/run starts one where the Cloud SDK has it", GoogleEmulatorEnv)
	}
	return addr
}

// Fake starts an ordering/orderingtest server with the given options for the
// length of a test and returns it with a connected client of Project. The
// client is closed before the server.
func Fake(t testing.TB, opts ...orderingtest.Option) (*orderingtest.Server, *pubsub.Client) {
	t.Helper()
	srv := orderingtest.Start(t, opts...)
	return srv, Client(t, srv.Addr)
}

// Buffer is a bytes.Buffer safe for concurrent use, so that a test can read
// what a program or a logger writes while it runs. The zero value is
// empty and ready.
type Buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

// String returns what was written so far.
func (b *Buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

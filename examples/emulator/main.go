// Command emulator runs a Pub/Sub server on a port as a standalone
// process, so that keyorder's examples can run as separate processes that
// share it: pstest, the official fake, by default, or with -fake
// ordering/orderingtest, which models ordering the way the service does
// (several messages of a key outstanding at once, keys moving between
// streams only when idle, whole tails redelivered). It prints the
// PUBSUB_EMULATOR_HOST line to use, and serves until SIGINT or SIGTERM.
//
// Flags: -port (default 8085, as gcloud's emulator; 0 picks a free one),
// -host (default localhost; 0.0.0.0 serves every interface, as a container
// needs) and -fake.
//
// One publisher and two subscriber processes on one subscription, with
// per-key order kept across both. Start the emulator (drop -fake for
// pstest) and leave it running:
//
//	go run ./examples/emulator -fake
//
// In another shell, start two subscribers, then the publisher, and wait
// for the subscribers to finish:
//
//	export PUBSUB_EMULATOR_HOST=localhost:8085
//	go run ./examples/orders -mode=subscribe -topic=orders -sub=orders-billing -wait=15s > sub1.txt &
//	go run ./examples/orders -mode=subscribe -topic=orders -sub=orders-billing -wait=15s > sub2.txt &
//	go run ./examples/orders -mode=publish -topic=orders -sub=orders-billing
//	wait
//	cat sub1.txt sub2.txt
//
// Each subscriber prints the sequences it processed per customer and
// fails if any customer's went back or repeated; merged, the two lists of
// a customer are 1 to 6, each once (see receiveFor in examples/orders).
// Then stop the emulator with Ctrl-C.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"strconv"
	"syscall"

	"cloud.google.com/go/pubsub/v2/pstest"

	"github.com/keyorder/keyorder/internal/harness"
	"github.com/keyorder/keyorder/ordering/orderingtest"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout)
	stop()
	if err != nil && !errors.Is(err, flag.ErrHelp) {
		fmt.Fprintln(os.Stderr, "emulator:", err)
		os.Exit(1)
	}
}

// run serves until ctx ends, then closes the server.
func run(ctx context.Context, args []string, out io.Writer) error {
	fs := flag.NewFlagSet("emulator", flag.ContinueOnError)
	port := fs.Int("port", 8085, "port to listen on; 0 picks a free one")
	host := fs.String("host", "localhost", "host or IP to listen on; 0.0.0.0 or :: for every interface")
	fake := fs.Bool("fake", false, "serve ordering/orderingtest instead of pstest")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	addr := net.JoinHostPort(*host, strconv.Itoa(*port))
	name, srv, err := listen(addr, *fake)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "%s serving on %s; in another shell:\nexport %s=%s\n", name, srv.addr, harness.EmulatorEnv, dialAddr(srv.addr))
	<-ctx.Done()
	fmt.Fprintf(out, "%s stopping\n", name)
	return srv.Close()
}

// dialAddr is the address a client on this machine dials to reach a server
// listening on addr: localhost when it listens on every interface.
func dialAddr(addr string) string {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return addr
	}
	if ip := net.ParseIP(host); host == "" || ip != nil && ip.IsUnspecified() {
		return net.JoinHostPort("localhost", port)
	}
	return addr
}

// server is either kind of server.
type server struct {
	io.Closer
	addr string
}

func listen(addr string, fake bool) (name string, srv server, err error) {
	if fake {
		s, err := orderingtest.New(orderingtest.WithAddress(addr))
		if err != nil {
			return "", server{}, err
		}
		return "fakepubsub", server{s, s.Addr}, nil
	}
	// pstest panics when it cannot listen; report that as the error it is.
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("pstest: %v", r)
		}
	}()
	s := pstest.NewServerWithAddress(addr)
	return "pstest", server{s, s.Addr}, nil
}

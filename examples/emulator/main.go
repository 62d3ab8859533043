// Command emulator runs a Pub/Sub server on a port as a standalone
// process, for keyorder's examples and for tests in any language: pstest,
// the official fake, by default, or with -fake ordering/orderingtest, which
// models ordering the way the service does (several messages of a key
// outstanding at once, keys moving between streams only when idle, whole
// tails redelivered) and injects faults. It prints the PUBSUB_EMULATOR_HOST
// line to use, and serves until SIGINT or SIGTERM.
//
// # Flags
//
//	-port N            port to listen on (default 8085, as gcloud's emulator; 0 picks one)
//	-host H            host or IP (default localhost; 0.0.0.0 serves every interface, as a container needs)
//	-fake              serve ordering/orderingtest instead of pstest
//	-check ADDR        serve nothing: probe the server at ADDR for the features keyorder
//	                   uses (ordering, filters, Seek, tail redelivery, push tokens, keys
//	                   coming back after a consumer dies...),
//	                   print which it has, and exit
//
// With -fake only:
//
//	-ack-deadline D    every lease lasts D, at most 10m, whatever clients ask (default 0: as asked,
//	                   10 s to 600 s); e.g. 500ms makes an unacked message come back fast
//	-response-size N   messages per StreamingPull response, 1 to 1000 (default 1000)
//	-latency D         each publish answers, and each delivery arrives, D later, at most 1m
//	                   (default 0): the round trips of the service, for benchmarks
//	-fault SPEC        inject a fault, on a schedule; repeatable
//	-control ADDR      serve the HTTP control endpoint on ADDR, e.g. localhost:8086
//
// # Faults
//
// A SPEC is a kind, then comma-separated NAME=VALUE pairs; values may be
// percent-encoded (%2C for a comma). The kinds are the fault methods of
// orderingtest.Server:
//
//	fail-publish            a publish fails and stores nothing          key|data, code, times, for
//	lose-publish-response   a publish is stored, then fails             key|data, code, times, for
//	hold-publish            publishes wait until the fault is removed   key|data, for
//	drop-acks               acks do not persist                         key|data, times, for
//	fail-acks               exactly-once acks fail                      key|data, failure, times, for
//	duplicate-deliveries    a message comes twice                       key|data, times, for
//	redeliver-key           a key's tail is redelivered now             key (required), sub
//	break-streams           open streams end with Unavailable           sub
//
// key=K and data=D choose the messages a fault applies to (default every
// message). code is a gRPC code name (default unavailable; e.g.
// deadline-exceeded, permission-denied). failure is transient or permanent
// (default permanent). times is how many firings (default 1; 0 until
// removed). sub is a subscription's full name or its ID in any project
// (default every subscription). Every kind also takes at=D, to apply it D
// after start (default at once), and every=D, to apply it again every D;
// for=D removes each fault D after it was made, which ends a hold.
//
//	-fault 'break-streams,every=10s'
//	-fault 'redeliver-key,key=c-01,sub=orders-billing,at=5s'
//	-fault 'lose-publish-response,key=c-02,times=2'
//	-fault 'hold-publish,key=c-03,at=2s,for=3s'
//
// # Control endpoint
//
// With -control, an HTTP endpoint injects faults and reports counters on
// request, for tests that drive the emulator from outside:
//
//	curl -d 'redeliver-key,key=c-01' localhost:8086/faults  # apply now: {"id":1,"spec":...,"applied":1,"hits":0,"result":3}
//	curl localhost:8086/faults                              # every spec: applied, hits (firings), result
//	curl -X DELETE localhost:8086/faults/1                  # stop a spec and remove its faults
//	curl localhost:8086/subscriptions                       # ["projects/p/subscriptions/s", ...]
//	curl 'localhost:8086/stats?sub=orders-billing'          # {"Delivered":12,"Acked":10,...}
//
// result is the number of messages redelivered or streams broken; stats
// are the fields of orderingtest.Stats.
//
// # Several processes
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
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

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

// specs collects repeated -fault flags, parsed as they come.
type specs []faultSpec

func (s *specs) String() string { return fmt.Sprint(len(*s), " faults") }
func (s *specs) Set(v string) error {
	f, err := parseFault(v)
	if err == nil {
		*s = append(*s, f)
	}
	return err
}

// fakeFlags are the flags that need -fake.
var fakeFlags = []string{"ack-deadline", "response-size", "latency", "fault", "control"}

// run serves until ctx ends, then closes the server.
func run(ctx context.Context, args []string, out io.Writer) error {
	fs := flag.NewFlagSet("emulator", flag.ContinueOnError)
	port := fs.Int("port", 8085, "port to listen on; 0 picks a free one")
	host := fs.String("host", "localhost", "host or IP to listen on; 0.0.0.0 or :: for every interface")
	fake := fs.Bool("fake", false, "serve ordering/orderingtest instead of pstest")
	ackDeadline := fs.Duration("ack-deadline", 0, "with -fake: every lease lasts this long (0: as clients ask)")
	responseSize := fs.Int("response-size", 1000, "with -fake: messages per StreamingPull response, 1 to 1000")
	latency := fs.Duration("latency", 0, "with -fake: added to each publish and each delivery")
	var faults specs
	fs.Var(&faults, "fault", "with -fake: a fault `SPEC` to inject; repeatable (see go doc)")
	control := fs.String("control", "", "with -fake: serve the HTTP control endpoint on this `address`")
	checkAddr := fs.String("check", "", "probe the server at `ADDR` for the features keyorder uses, print them, and exit")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if *checkAddr != "" {
		return check(ctx, *checkAddr, out, probes)
	}
	addr := net.JoinHostPort(*host, strconv.Itoa(*port))
	if !*fake {
		var err error
		fs.Visit(func(f *flag.Flag) {
			for _, name := range fakeFlags {
				if f.Name == name {
					err = fmt.Errorf("-%s needs -fake", name)
				}
			}
		})
		if err != nil {
			return err
		}
		return servePstest(ctx, addr, out)
	}
	srv, err := orderingtest.New(orderingtest.WithAddress(addr),
		orderingtest.WithAckDeadline(*ackDeadline), orderingtest.WithResponseSize(*responseSize),
		orderingtest.WithLatency(*latency))
	if err != nil {
		return err
	}
	return serveFake(ctx, srv, faults, *control, out)
}

// servePstest serves pstest on addr until ctx ends, taking messages up to
// the service's 10 MB limit (harness.StartPstest).
func servePstest(ctx context.Context, addr string, out io.Writer) error {
	srv, err := harness.StartPstest(addr)
	if err != nil {
		return err
	}
	announce(out, "pstest", srv.Addr)
	<-ctx.Done()
	fmt.Fprintln(out, "pstest stopping")
	return srv.Close()
}

// serveFake serves srv, injects faults, and serves the control endpoint
// on control unless it is empty, until ctx ends. It closes srv.
func serveFake(ctx context.Context, srv *orderingtest.Server, faults []faultSpec, control string, out io.Writer) error {
	defer srv.Close()
	var lis net.Listener
	if control != "" {
		var err error
		if lis, err = net.Listen("tcp", control); err != nil {
			return fmt.Errorf("control endpoint: %w", err)
		}
	}
	announce(out, "orderingtest", srv.Addr)
	injected := newFaults(srv)
	defer injected.close() // before srv.Close: no fault is applied to a closed server
	var httpSrv *http.Server
	served := make(chan error, 1)
	if lis != nil {
		httpSrv = &http.Server{Handler: controlHandler(srv, injected), ReadHeaderTimeout: 10 * time.Second}
		go func() { served <- httpSrv.Serve(lis) }()
		fmt.Fprintf(out, "control endpoint on http://%s\n", dialAddr(lis.Addr().String()))
	}
	for _, f := range faults {
		st := injected.add(f)
		fmt.Fprintf(out, "fault %d: %s\n", st.ID, st.Spec)
	}

	<-ctx.Done()
	fmt.Fprintln(out, "orderingtest stopping")
	if httpSrv == nil {
		return nil
	}
	shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err := httpSrv.Shutdown(shutdown)
	if serr := <-served; !errors.Is(serr, http.ErrServerClosed) {
		err = errors.Join(err, serr)
	}
	return err
}

// announce prints where the server listens and the line that points
// clients at it.
func announce(out io.Writer, name, addr string) {
	fmt.Fprintf(out, "%s serving on %s; in another shell:\nexport %s=%s\n", name, addr, harness.EmulatorEnv, dialAddr(addr))
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

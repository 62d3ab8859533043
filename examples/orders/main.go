// Command orders is keyorder end to end. It publishes order events for
// many customers, keyed by customer, receives them with 4 workers, and
// checks with the order checker that each customer's events were processed
// once each, in publish order. It prints a line per customer and a total,
// and exits non-zero on any violation or missing message.
//
// The keys come from all three sources of rule P1: the call option
// (WithOrderingKey), the partition-key header, and, for one customer, the
// publisher's default (WithDefaultOrderingKey). Each message's data names
// its customer and sequence, {"customer":"c-03","seq":4,"event":"shipped"},
// so the subscriber can check both the key and the order.
//
// It uses an embedded pstest server, or the emulator PUBSUB_EMULATOR_HOST
// names, with a topic and subscription new to each run:
//
//	go run ./examples/orders    # or: make run
//
// pstest delivers an ordered key's messages one at a time, about 100 a
// second per stream, so the default sizes finish in about a second there.
//
// # Several processes
//
// With -mode=publish the program only publishes, and with -mode=subscribe
// it only receives, for -wait, so that one publisher and several
// subscribers can share a named subscription on a standalone emulator
// (see examples/emulator for the commands):
//
//	go run ./examples/orders -mode=subscribe -topic=orders -sub=orders-billing -wait=10s
//	go run ./examples/orders -mode=publish -topic=orders -sub=orders-billing
//
// Both modes create the topic and the subscription if they are missing, so
// no message is lost to a subscription that does not exist yet. A
// subscriber holds at most 8 messages at a time, so that the server spreads
// the keys over the subscribers, and checks that each key's messages came
// in increasing order; it cannot know which ones the others had. See
// receiveFor for what order means across processes.
//
// # Watching it
//
// With -status=localhost:8080 the program serves the subscription's
// status page (package subscriber/statuspage) at
// http://localhost:8080/debug/keyorder/ while it receives. -work makes
// each order take a while, so that a backlog builds, and -flaky=c-07
// fails customer c-07's second order past its attempts, so that its key
// is held until the server brings the order back, and the hold is logged.
// On the ordering-faithful fake, since pstest delivers about 100 orders a
// second:
//
//	go run ./examples/emulator -fake &
//	PUBSUB_EMULATOR_HOST=localhost:8085 go run ./examples/orders \
//		-customers=300 -events=40 -work=8ms -flaky=c-07 -status=localhost:8080
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"cloud.google.com/go/pubsub/v2"

	"github.com/keyorder/keyorder/internal/harness"
	"github.com/keyorder/keyorder/subscriber"
)

// workers is the number of worker partitions the subscriber runs.
const workers = 4

// sharedOutstanding caps the messages a subscriber holds at a time when it
// shares the subscription with other processes. Without a cap, the first
// subscriber to ask may be sent every key at once, since a key stays with
// the client that has messages of it outstanding; with one, the service
// hands the keys it has no room for to the others.
const sharedOutstanding = 2 * workers

// config is what the flags ask for.
type config struct {
	mode      string // all, publish or subscribe
	topic     string // topic ID; "" in mode all: a new one
	sub       string // subscription ID; "" in mode all: a new one
	customers int
	events    int           // per customer
	wait      time.Duration // mode all: for every order; subscribe: how long to run
	status    string        // address of the status page; "" for none
	work      time.Duration // how long each order takes to process
	flaky     string        // a customer whose second order fails its first calls
}

func parseFlags(args []string) (config, error) {
	var cfg config
	fs := flag.NewFlagSet("orders", flag.ContinueOnError)
	fs.StringVar(&cfg.mode, "mode", "all", "all: publish, receive and check; publish: only publish; subscribe: only receive and check")
	fs.StringVar(&cfg.topic, "topic", "", "topic ID (required unless -mode=all, which makes a new one)")
	fs.StringVar(&cfg.sub, "sub", "", "subscription ID (required unless -mode=all, which makes a new one)")
	fs.IntVar(&cfg.customers, "customers", 12, "customers, each an ordering key")
	fs.IntVar(&cfg.events, "events", 6, "order events per customer")
	fs.DurationVar(&cfg.wait, "wait", 30*time.Second, "-mode=all: how long to wait for every order; -mode=subscribe: how long to receive")
	fs.StringVar(&cfg.status, "status", "", "serve the subscription's status page at this address while receiving, e.g. localhost:8080")
	fs.DurationVar(&cfg.work, "work", 0, "how long processing each order takes")
	fs.StringVar(&cfg.flaky, "flaky", "", "a customer, e.g. c-03, whose second order fails its first 5 calls, so that its key is held for a while")
	if err := fs.Parse(args); err != nil {
		return config{}, err
	}
	if fs.NArg() > 0 {
		return config{}, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	switch {
	case cfg.mode != "all" && cfg.mode != "publish" && cfg.mode != "subscribe":
		return config{}, fmt.Errorf("-mode=%s: want all, publish or subscribe", cfg.mode)
	case cfg.mode != "all" && (cfg.topic == "" || cfg.sub == ""):
		return config{}, fmt.Errorf("-mode=%s needs -topic and -sub, shared with the other processes", cfg.mode)
	case cfg.customers < 1 || cfg.events < 1:
		return config{}, errors.New("-customers and -events must be at least 1")
	case cfg.wait <= 0:
		return config{}, errors.New("-wait must be positive")
	case cfg.work < 0:
		return config{}, errors.New("-work must not be negative")
	case cfg.status != "" && cfg.mode == "publish":
		return config{}, errors.New("-status needs a mode that receives")
	}
	return cfg, nil
}

func main() {
	cfg, err := parseFlags(os.Args[1:])
	if errors.Is(err, flag.ErrHelp) {
		return
	}
	if err == nil {
		// Interrupting a subscriber ends its run early, with its report.
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		err = run(ctx, cfg, os.Stdout)
		stop()
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "orders:", err)
		os.Exit(1)
	}
}

// run connects to the server and does what cfg.mode says.
func run(ctx context.Context, cfg config, out io.Writer) error {
	client, where, closeAll, err := harness.Open(ctx)
	if err != nil {
		return err
	}
	defer closeAll()
	fmt.Fprintln(out, "server:", where)
	return demo(ctx, client, cfg, out)
}

func demo(ctx context.Context, client *pubsub.Client, cfg config, out io.Writer) error {
	if cfg.topic == "" || cfg.sub == "" {
		// New names, so that runs against a long-lived emulator do not
		// see each other's messages.
		name := "orders-" + strconv.FormatInt(time.Now().UnixNano(), 36)
		cfg.topic, cfg.sub = name, name
	}
	sub, err := subscription(ctx, client, cfg)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "topic %s, ordered subscription %s\n", cfg.topic, cfg.sub)
	if cfg.status != "" && cfg.mode != "publish" {
		url, stop, err := serveStatus(cfg.status, sub)
		if err != nil {
			return err
		}
		defer stop()
		fmt.Fprintln(out, "status page:", url)
	}
	switch cfg.mode {
	case "publish":
		return publish(ctx, client, cfg.topic, cfg, out)
	case "subscribe":
		_, err := receiveFor(ctx, sub, cfg, out)
		return err
	}
	if err := publish(ctx, client, cfg.topic, cfg, out); err != nil {
		return err
	}
	return receiveAll(ctx, sub, cfg, out)
}

// subscription creates or opens cfg's ordered subscription, and its topic.
func subscription(ctx context.Context, client *pubsub.Client, cfg config) (*subscriber.Subscription, error) {
	opts := []subscriber.Option{subscriber.WithWorkers(workers)}
	if cfg.mode == "subscribe" {
		rs := pubsub.DefaultReceiveSettings
		rs.MaxOutstandingMessages = sharedOutstanding
		opts = append(opts, subscriber.WithReceiveSettings(rs))
	}
	sub, err := subscriber.CreateWithTopic(ctx, client, cfg.topic, cfg.sub, opts...)
	if err != nil {
		return nil, err
	}
	if !sub.Ordered() {
		return nil, fmt.Errorf("%s exists without message ordering (S1): use another -sub", sub.Name())
	}
	return sub, nil
}

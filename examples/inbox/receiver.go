package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/keyorder/keyorder/internal/harness"
	"github.com/keyorder/keyorder/subscriber"
)

// receiveMain is the receiver process: it applies the subscription's
// deposits to the inbox until the inbox holds -expect effects, then exits
// 0. It exits 1 on any error, and 2 for bad flags. The demo kills the
// first one it starts with SIGKILL, in the middle of the run.
func receiveMain(args []string, log io.Writer) int {
	fs := flag.NewFlagSet("inbox -receive", flag.ContinueOnError)
	fs.SetOutput(log)
	addr := fs.String("addr", "", "address of the Pub/Sub server")
	subID := fs.String("sub", "", "subscription ID")
	path := fs.String("db", "", "the inbox's SQLite file")
	expect := fs.Int("expect", 0, "exit once the inbox holds this many effects")
	timeout := fs.Duration("timeout", time.Minute, "give up after this long")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *addr == "" || *subID == "" || *path == "" || *expect < 1 {
		fmt.Fprintln(log, "inbox -receive: -addr, -sub, -db and -expect are required")
		return 2
	}
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	if err := receive(ctx, *addr, *subID, *path, *expect, log); err != nil {
		fmt.Fprintln(log, "inbox -receive:", err)
		return 1
	}
	return 0
}

// receive runs the subscription's Receive until the store at path holds
// expect effects, then adds the copies its inbox found to the store's
// count of redeliveries.
func receive(ctx context.Context, addr, subID, path string, expect int, log io.Writer) error {
	st, err := openStore(ctx, path, slog.New(slog.NewTextHandler(log, &slog.HandlerOptions{Level: slog.LevelWarn})))
	if err != nil {
		return err
	}
	defer st.Close()
	client, err := harness.ConnectProject(ctx, addr, harness.ExampleProject())
	if err != nil {
		return err
	}
	defer client.Close()
	sub, err := subscriber.Open(ctx, client, subID, subscriber.WithWorkers(4))
	if err != nil {
		return err
	}

	rctx, stop := context.WithCancel(ctx)
	defer stop()
	var done atomic.Bool // the store holds every effect
	apply := st.handler()
	err = sub.Receive(rctx, func(ctx context.Context, d *subscriber.Delivery) error {
		if err := apply(ctx, d); err != nil {
			return err // retried; the transaction left nothing behind
		}
		if n, err := st.applied(ctx); err == nil && n >= expect {
			done.Store(true)
			stop()
		}
		return nil
	})
	switch {
	case err != nil:
		return err
	case !done.Load():
		return errors.Join(ctx.Err(), fmt.Errorf("the store does not hold %d effects", expect))
	}
	return st.addRedelivered(ctx, st.in.Stats().Copies)
}

package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/keyorder/keyorder/internal/harness"
	"github.com/keyorder/keyorder/subscriber"
)

// A hand-over before any apply. With -hand-over, a first replica starts
// alone: it receives events, runs none of them to the end, and stops,
// its Receive ending; only then do the other replicas start, and they
// must take over what it had, every event of it, in commit order. On a
// server that redelivers as Google's emulator does, what it gives back
// comes back one message at a time, in the order it was nacked.

// handOverAfter is how many events the first replica holds, running or
// queued, before it stops.
const handOverAfter = 8

// handedOver begins the line the first replica prints as it stops.
const handedOver = "handed over before applying any"

// errHandedOver is what the first replica's handler returns: it applies
// nothing.
var errHandedOver = errors.New("handed over unapplied")

// handOver is the first replica: it receives events until it holds
// handOverAfter of them, then ends its Receive, which gives them back to
// the service unapplied, and exits.
func handOver(ctx context.Context, addr, subID string, stampKey []byte, out io.Writer) error {
	client, err := harness.ConnectProject(ctx, addr, harness.ExampleProject())
	if err != nil {
		return err
	}
	defer client.Close()
	opts := []subscriber.Option{subscriber.WithWorkers(4)}
	if stampKey != nil {
		opts = append(opts, subscriber.WithStampKey(stampKey))
	}
	sub, err := subscriber.Open(ctx, client, subID, opts...)
	if err != nil {
		return err
	}
	rctx, stop := context.WithCancel(ctx)
	defer stop()
	release := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- sub.Receive(rctx, func(ctx context.Context, d *subscriber.Delivery) error {
			select {
			case <-release:
			case <-ctx.Done():
			}
			return errHandedOver
		})
	}()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	var held int
	for held < handOverAfter {
		select {
		case err := <-done:
			return fmt.Errorf("receive ended before it held %d events: %v", handOverAfter, err)
		case <-ctx.Done():
			return fmt.Errorf("held %d events of %d: %w", held, handOverAfter, ctx.Err())
		case <-tick.C:
		}
		st := sub.Stats()
		held = st.Running + st.Queued
	}
	// Receive's context ends first, so that the calls that fail now are
	// given back, as a shutdown's, not tried again.
	stop()
	close(release)
	if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
		return err
	}
	st := sub.Stats()
	if st.Acked != 0 {
		return fmt.Errorf("acked %d events, want none", st.Acked)
	}
	fmt.Fprintf(out, "outbox replica 0: held %d events and %s\n", held, handedOver)
	return nil
}

package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	"github.com/keyorder/keyorder/ordering/orderingtest"
	"github.com/keyorder/keyorder/subscriber"
)

// flakyCalls is how many calls of -flaky's second order fail.
const flakyCalls = subscriber.DefaultMaxAttempts

var errFlaky = errors.New("downstream unavailable (-flaky)")

// tally is what one Receive processed. Its handler runs on the
// subscriber's worker goroutines, several at once.
type tally struct {
	check *orderingtest.Checker
	want  int           // stop once this many are processed; 0: never
	stop  func()        // ends the Receive
	work  time.Duration // each order takes this long
	flaky string        // this customer's second order fails its first flakyCalls calls

	mu   sync.Mutex       // guards the fields below
	n    int              // orders processed
	seqs map[string][]int // each key's sequences, in processing order
	bad  []string         // messages whose key or data is wrong
}

func newTally(check *orderingtest.Checker, want int, stop func(), cfg config) *tally {
	return &tally{check: check, want: want, stop: stop, work: cfg.work, flaky: cfg.flaky, seqs: map[string][]int{}}
}

// handle is the subscriber's handler: it records the delivery's key and
// sequence in the order the worker processes them.
func (t *tally) handle(ctx context.Context, d *subscriber.Delivery) error {
	if t.work > 0 {
		select {
		case <-time.After(t.work):
		case <-ctx.Done(): // the drain timeout
			return ctx.Err()
		}
	}
	var o order
	if err := json.Unmarshal(d.Data, &o); err != nil || o.Customer != d.Key {
		t.mu.Lock()
		t.bad = append(t.bad, fmt.Sprintf("message %s has key %q and data %s", d.ID, d.Key, d.Data))
		t.mu.Unlock()
		return nil // acked: a redelivery would be just as wrong
	}
	if o.Customer == t.flaky && o.Seq == 2 && d.Attempt <= flakyCalls {
		// Past the subscriber's 5 attempts the key is held until the
		// service brings the order back; its next call succeeds.
		return fmt.Errorf("order %d of %s: %w", o.Seq, o.Customer, errFlaky)
	}
	t.check.Record(d.Key, o.Seq)
	t.mu.Lock()
	defer t.mu.Unlock()
	t.seqs[d.Key] = append(t.seqs[d.Key], o.Seq)
	if t.n++; t.n == t.want {
		t.stop()
	}
	return nil
}

// processed returns how many orders were processed and the first wrong
// message, if any.
func (t *tally) processed() (n int, bad error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.bad) > 0 {
		bad = fmt.Errorf("%d messages with a wrong key or data; the first: %s", len(t.bad), t.bad[0])
	}
	return t.n, bad
}

// receiveAll receives every customer's orders, or fails after cfg.wait,
// and checks that each customer's were processed once each, in order.
func receiveAll(ctx context.Context, sub *subscriber.Subscription, cfg config, out io.Writer) error {
	check := orderingtest.NewChecker()
	for i := range cfg.customers {
		check.Expect(customer(i), cfg.events)
	}
	want := cfg.customers * cfg.events
	rctx, cancel := context.WithTimeout(ctx, cfg.wait)
	defer cancel()
	t := newTally(check, want, cancel, cfg)
	start := time.Now()
	if err := sub.Receive(rctx, t.handle); err != nil {
		return err
	}
	n, bad := t.processed()
	fmt.Fprintf(out, "processed %d of %d orders in %v with %d workers\n",
		n, want, time.Since(start).Round(time.Millisecond), workers)
	rep := check.Report()
	fmt.Fprintln(out, rep)
	switch {
	case bad != nil:
		return bad
	case n < want && ctx.Err() != nil:
		return fmt.Errorf("interrupted after %d of %d orders", n, want)
	case n < want:
		return fmt.Errorf("only %d of %d orders were processed within -wait=%v", n, want, cfg.wait)
	}
	if err := rep.Err(); err != nil {
		return err
	}
	fmt.Fprintln(out, "every customer's orders were processed once each, in publish order")
	return nil
}

// receiveFor receives for cfg.wait, or until ctx ends, as one of several
// processes sharing the subscription, and returns each key's sequences in
// the order processed.
//
// What per-key order means across processes: the service hands a key's
// messages to one subscriber client at a time, and moves the key to
// another only once everything delivered of it has been acked, that is,
// after its handler returned. So each process sees each key's messages in
// increasing order, with gaps where another process had the key, and
// together the processes see every message once. This process can check
// only the first part, and does: any step back or repeat is a violation
// (the strict order checker's out-of-order and duplicates), while gaps are
// not. The second part is checked by merging the lists that all
// subscribers print. It holds while every subscriber runs to the end: one
// that dies with messages unacked leaves them to be redelivered to
// another, and any it processed whose ack was lost are then processed
// twice, once in each process (at-least-once delivery, which S6 can
// dedupe only within a process).
func receiveFor(ctx context.Context, sub *subscriber.Subscription, cfg config, out io.Writer) (map[string][]int, error) {
	check := orderingtest.NewChecker()
	rctx, cancel := context.WithTimeout(ctx, cfg.wait)
	defer cancel()
	t := newTally(check, 0, cancel, cfg)
	fmt.Fprintf(out, "receiving from %s for %v with %d workers\n", sub.Name(), cfg.wait, workers)
	if err := sub.Receive(rctx, t.handle); err != nil {
		return nil, err
	}
	// Receive has returned, so no handler runs: t.seqs is ours to read.
	n, bad := t.processed()
	rep := check.Report()
	if n == 0 && bad == nil {
		fmt.Fprintln(out, "processed no orders: other subscribers had them all")
		return t.seqs, nil
	}
	fmt.Fprintf(out, "processed %d orders of %d customers; gaps are orders other subscribers had\n", n, len(rep.Keys))
	violations := 0
	for _, k := range rep.Keys {
		verdict := "increasing"
		if v := len(k.OutOfOrder) + len(k.Duplicates) + len(k.Unexpected); v > 0 {
			verdict = fmt.Sprintf("NOT INCREASING: %d out of order %v, %d repeated %v",
				len(k.OutOfOrder), k.OutOfOrder, len(k.Duplicates), k.Duplicates)
			violations += v
		}
		fmt.Fprintf(out, "%s: %s: %s\n", k.Key, seqList(t.seqs[k.Key]), verdict)
	}
	switch {
	case bad != nil:
		return t.seqs, bad
	case violations > 0:
		return t.seqs, fmt.Errorf("%w: %d records out of order or repeated", orderingtest.ErrViolation, violations)
	}
	fmt.Fprintln(out, "each customer's orders came in increasing order")
	return t.seqs, nil
}

func seqList(seqs []int) string {
	return strings.Trim(fmt.Sprint(seqs), "[]")
}

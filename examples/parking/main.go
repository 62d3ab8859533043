// Command parking shows a poison message parked, a fix, and its release,
// with every account's events applied once each, in order.
//
// It publishes six events for each of three accounts, keyed by account.
// The third event of acct-2 is malformed: the handler cannot read its
// amount and says so with subscriber.Permanent. With subscriber.WithParking
// that parks acct-2: the event and every later one of acct-2 go to the
// parking topic, in order, while acct-1 and acct-3 carry on. Two more
// events of acct-2, published while it is parked, follow the others there.
// Then a fix is deployed (the handler learns to read the amount) and
// sub.Release runs acct-2's parked events, in order, before the account's
// next event. The program prints what ran, per account, and exits non-zero
// if any account's events ran out of order, twice or not at all.
//
// It runs against keyorder's ordering-faithful fake, embedded, or the
// emulator PUBSUB_EMULATOR_HOST names (project GOOGLE_CLOUD_PROJECT, else
// keyorder-test), which must model topic retention,
// Seek and subscription filters (go run ./examples/emulator -fake does):
//
//	go run ./examples/parking
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"cloud.google.com/go/pubsub/v2"

	"github.com/keyorder/keyorder/internal/harness"
	"github.com/keyorder/keyorder/ordering/orderingtest"
	"github.com/keyorder/keyorder/publisher"
	"github.com/keyorder/keyorder/subscriber"
)

func main() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := run(ctx, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "parking:", err)
		os.Exit(1)
	}
}

// An event changes an account's balance. Amount is a string, as it came
// from an upstream system, and is sometimes written in words.
type event struct {
	Account string `json:"account"`
	Seq     int    `json:"seq"`
	Amount  string `json:"amount"`
}

const (
	accounts = 3
	events   = 6 // per account at first
	poison   = "acct-2"
)

// run connects to a server and runs the demonstration.
func run(ctx context.Context, out io.Writer) error {
	client, where, closeAll, err := harness.OpenFake(ctx)
	if err != nil {
		return err
	}
	defer closeAll()
	fmt.Fprintln(out, "server:", where)
	return demo(ctx, client, out)
}

func demo(ctx context.Context, client *pubsub.Client, out io.Writer) (err error) {
	suffix := time.Now().Format("150405.000000")
	topic, subID, parked := "ledger-"+suffix, "ledger-balances-"+suffix, "ledger-parked-"+suffix
	sub, err := subscriber.CreateWithTopic(ctx, client, topic, subID,
		subscriber.WithParking(parked),
		subscriber.WithMaxAttempts(3),
		subscriber.WithBackoff(10*time.Millisecond, 50*time.Millisecond))
	if err != nil {
		return err
	}
	p, err := publisher.New(client, topic)
	if err != nil {
		return err
	}
	defer p.Close(context.WithoutCancel(ctx))
	publish := func(account string, from, to int) error {
		for seq := from; seq <= to; seq++ {
			e := event{Account: account, Seq: seq, Amount: strconv.Itoa(seq * 10)}
			if account == poison && seq == 3 {
				e.Amount = "thirty" // the poison message
			}
			data, _ := json.Marshal(e)
			if _, err := p.Publish(ctx, &publisher.Message{Data: data}, publisher.WithOrderingKey(account)).Get(ctx); err != nil {
				return err
			}
		}
		return nil
	}
	for i := 1; i <= accounts; i++ {
		if err := publish(account(i), 1, events); err != nil {
			return err
		}
	}
	fmt.Fprintf(out, "published %d events for each of %d accounts; %s's third has the amount %q\n", events, accounts, poison, "thirty")

	l := newLedger()
	rctx, stop := context.WithCancel(ctx)
	// A Receive that fails ends the waits below, and demo, with its error.
	ctx, fail := context.WithCancelCause(ctx)
	defer fail(nil)
	received := make(chan error, 1)
	go func() {
		err := sub.Receive(rctx, l.apply)
		if err != nil {
			fail(fmt.Errorf("receive: %w", err))
		}
		received <- err
	}()
	defer func() {
		stop()
		<-received
		if cause := context.Cause(ctx); err != nil && cause != nil && !errors.Is(cause, context.Canceled) {
			err = cause
		}
	}()

	// acct-1 and acct-3 finish; acct-2 runs its first two events and parks.
	if err := waitFor(ctx, func() bool { return l.count() == 2*events+2 }); err != nil {
		return fmt.Errorf("the healthy accounts did not finish: %w", err)
	}
	k, err := awaitParked(ctx, sub, 4)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "parked: %s, %d events, because: %s\n", k.Key, k.Messages, k.LastError)
	if err := publish(poison, events+1, events+2); err != nil {
		return err
	}
	if k, err = awaitParked(ctx, sub, 6); err != nil {
		return err
	}
	fmt.Fprintf(out, "published 2 more events for %s while parked: %d events parked\n", poison, k.Messages)
	l.print(out, "before the release")

	l.fixed.Store(true)
	fmt.Fprintln(out, "fix deployed: amounts in words are read")
	if err := sub.Release(ctx, poison); err != nil {
		return fmt.Errorf("release: %w", err)
	}
	fmt.Fprintf(out, "released %s\n", poison)
	if err := publish(poison, events+3, events+3); err != nil {
		return err
	}
	if err := waitFor(ctx, func() bool { return l.count() == accounts*events+3 }); err != nil {
		return fmt.Errorf("%s did not finish: %w", poison, err)
	}
	l.print(out, "after the release")

	rep := l.check.Report()
	fmt.Fprintln(out, "order check:", rep.Summary())
	if err := rep.Err(); err != nil {
		return err
	}
	if list, err := sub.Parked(ctx); err != nil || len(list) > 0 {
		return fmt.Errorf("still parked: %v %v", list, err)
	}
	fmt.Fprintln(out, "every account's events ran once each, in publish order; nothing is parked")
	return nil
}

func account(i int) string { return "acct-" + strconv.Itoa(i) }

// ledger applies events to balances. Its handler runs on the subscriber's
// workers, and on the goroutine that calls Release.
type ledger struct {
	check *orderingtest.Checker
	fixed atomic.Bool // the fix is deployed

	mu       sync.Mutex // guards the fields below
	seqs     map[string][]int
	balances map[string]int
	n        int
}

func newLedger() *ledger {
	l := &ledger{check: orderingtest.NewChecker(), seqs: map[string][]int{}, balances: map[string]int{}}
	for i := 1; i <= accounts; i++ {
		l.check.Expect(account(i), events)
	}
	l.check.Expect(poison, events+3) // three more are published later
	return l
}

var errAmount = errors.New("unreadable amount")

// words are the amounts the fix can read.
var words = map[string]int{"thirty": 30}

// apply is the handler.
func (l *ledger) apply(_ context.Context, d *subscriber.Delivery) error {
	var e event
	if err := json.Unmarshal(d.Data, &e); err != nil {
		return subscriber.Permanent(err)
	}
	amount, err := strconv.Atoi(e.Amount)
	if err != nil {
		w, ok := words[e.Amount]
		if !l.fixed.Load() || !ok {
			// Retrying will not help: park the account until a fix.
			return subscriber.Permanent(fmt.Errorf("%w %q in event %d", errAmount, e.Amount, e.Seq))
		}
		amount = w
	}
	l.check.Record(d.Key, e.Seq)
	l.mu.Lock()
	defer l.mu.Unlock()
	l.seqs[d.Key] = append(l.seqs[d.Key], e.Seq)
	l.balances[d.Key] += amount
	l.n++
	return nil
}

func (l *ledger) count() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.n
}

// print lists each account's events in the order they ran, and its balance.
func (l *ledger) print(out io.Writer, when string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	fmt.Fprintf(out, "%s:\n", when)
	keys := make([]string, 0, len(l.seqs))
	for k := range l.seqs {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		seqs := make([]string, len(l.seqs[k]))
		for i, s := range l.seqs[k] {
			seqs[i] = strconv.Itoa(s)
		}
		fmt.Fprintf(out, "  %s: events %s, balance %d\n", k, strings.Join(seqs, " "), l.balances[k])
	}
}

// awaitParked waits until acct-2 is parked with n events.
func awaitParked(ctx context.Context, sub *subscriber.Subscription, n int) (subscriber.ParkedKey, error) {
	var k subscriber.ParkedKey
	err := waitFor(ctx, func() bool {
		list, err := sub.Parked(ctx)
		if err != nil || len(list) != 1 {
			return false
		}
		k = list[0]
		return k.Key == poison && k.Messages == n
	})
	if err != nil {
		return k, fmt.Errorf("%s was not parked with %d events: %w", poison, n, err)
	}
	return k, nil
}

// waitFor checks cond every 20 ms until it holds or ctx ends.
func waitFor(ctx context.Context, cond func() bool) error {
	t := time.NewTicker(20 * time.Millisecond)
	defer t.Stop()
	for !cond() {
		select {
		case <-t.C:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

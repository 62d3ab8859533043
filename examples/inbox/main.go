// Command inbox shows exactly-once effects across a crash, with a
// producer's sequence numbers and the receiver's own database.
//
// Pub/Sub delivers at least once: a receiver that dies after committing a
// message's effect and before its ack reached the service gets the message
// again, and keyorder's in-memory checks (the ID window, the sequence
// window) died with it. The receiver's store must tell. Here the store is
// SQLite (modernc.org/sqlite, pure Go), and the receiver's handler is
// keyorder's inbox (subscriber/inbox): each deposit is applied in the
// transaction that records its stamp, so a redelivery of a deposit
// applied before the crash finds its stamp recorded, commits nothing, and
// is acked.
//
// The program runs the whole story on an embedded ordering/orderingtest
// server:
//
//  1. It publishes a third of the deposits and starts a receiver process
//     (this program with -receive), which applies them.
//  2. It makes the server drop acks, as if they never arrived, publishes
//     the second third, and kills the receiver with SIGKILL once at least 20
//     applied deposits have lost their acks: those come back.
//  3. It publishes the rest and starts a second receiver, which applies
//     everything left and exits once the store holds every deposit.
//
// It then checks the store: every deposit applied exactly once, every
// balance right, and redeliveries of applied deposits seen and skipped. It
// exits non-zero if any of that does not hold.
//
//	go run ./examples/inbox
//
// The deposits are published through keyorder's publisher, which stamps
// each with its producer ID and its number in the producer's sequence for
// its account (see ordering.Stamp); the inbox keeps the last number
// applied per account and producer, in the store's own table.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"time"

	"github.com/keyorder/keyorder/internal/harness"
	"github.com/keyorder/keyorder/ordering/orderingtest"
	"github.com/keyorder/keyorder/publisher"
	"github.com/keyorder/keyorder/subscriber"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "-receive" {
		os.Exit(receiveMain(os.Args[2:], os.Stderr))
	}
	cfg := config{}
	flag.IntVar(&cfg.accounts, "accounts", 12, "accounts, one ordering key each")
	flag.IntVar(&cfg.deposits, "deposits", 60, "deposits per account")
	flag.Parse()
	exe, err := os.Executable()
	if err != nil {
		fmt.Fprintln(os.Stderr, "inbox:", err)
		os.Exit(1)
	}
	dir, err := os.MkdirTemp("", "inbox-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "inbox:", err)
		os.Exit(1)
	}
	cfg.db = filepath.Join(dir, "inbox.db")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	spawn := func(args ...string) *exec.Cmd {
		return exec.CommandContext(ctx, exe, append([]string{"-receive"}, args...)...)
	}
	_, err = run(ctx, cfg, spawn, os.Stdout)
	cancel()
	_ = os.RemoveAll(dir)
	if err != nil {
		fmt.Fprintln(os.Stderr, "inbox:", err)
		os.Exit(1)
	}
}

// config is what a run does.
type config struct {
	accounts, deposits int
	db                 string // the SQLite file
}

// producer is the stable part of the producer ID the publisher stamps its
// messages with (publisher.WithProducerID): each Publisher adds an
// incarnation of its own.
const producer = "deposits"

// outcome is what a run saw, for tests.
type outcome struct {
	atKill int // effects in the store when the first receiver was killed
	report report
}

// run tells the story of the package doc. spawn returns the command that
// starts a receiver process with the given flags.
func run(ctx context.Context, cfg config, spawn func(args ...string) *exec.Cmd, out io.Writer) (oc outcome, err error) {
	total := cfg.accounts * cfg.deposits
	if cfg.deposits < 3 || total < 1 {
		return oc, fmt.Errorf("need at least 1 account and 3 deposits, not %d and %d", cfg.accounts, cfg.deposits)
	}
	if err := harness.EmbeddedOnly("examples/inbox", "makes the leases of a killed receiver run out in a second"); err != nil {
		return oc, err
	}
	// Leases of a killed receiver run out after a second, not ten.
	srv, err := orderingtest.New(orderingtest.WithAckDeadline(time.Second))
	if err != nil {
		return oc, err
	}
	defer srv.Close()
	client, err := harness.ConnectProject(ctx, srv.Addr, harness.ExampleProject())
	if err != nil {
		return oc, err
	}
	defer client.Close()
	sub, err := subscriber.CreateWithTopic(ctx, client, "deposits", "deposits-inbox")
	if err != nil {
		return oc, err
	}
	receiver := func() *exec.Cmd {
		cmd := spawn("-addr", srv.Addr, "-sub", "deposits-inbox", "-db", cfg.db, "-expect", strconv.Itoa(total))
		cmd.Stdout, cmd.Stderr = out, out
		return cmd
	}
	third := cfg.deposits / 3
	p, err := publisher.New(client, "deposits", publisher.WithProducerID(producer))
	if err != nil {
		return oc, err
	}
	defer func() {
		if cerr := p.Close(ctx); cerr != nil && err == nil {
			err = cerr
		}
	}()

	// 1. A third of the deposits, applied by the first receiver.
	if err := publish(ctx, p, cfg.accounts, 1, third); err != nil {
		return oc, err
	}
	first := receiver()
	if err := first.Start(); err != nil {
		return oc, err
	}
	defer func() { _ = first.Process.Kill() }()
	acked := func(n int) func() bool {
		return func() bool { return srv.Stats(sub.Name()).Acked >= n }
	}
	if err := srv.WaitFor(ctx, acked(cfg.accounts*third)); err != nil {
		return oc, fmt.Errorf("the first receiver did not apply the first third: %w", err)
	}

	// 2. Acks stop arriving; the receiver dies with deposits applied and
	// not acked.
	lost := srv.DropAcks(orderingtest.AnyMessage, 0)
	if err := publish(ctx, p, cfg.accounts, third+1, 2*third); err != nil {
		return oc, err
	}
	if err := lost.Wait(ctx, min(20, cfg.accounts*third)); err != nil {
		return oc, fmt.Errorf("no ack was lost: %w", err)
	}
	if err := first.Process.Kill(); err != nil {
		return oc, err
	}
	_ = first.Wait() // killed
	lost.Remove()
	st, err := openStore(ctx, cfg.db, slog.New(slog.DiscardHandler))
	if err != nil {
		return oc, err
	}
	defer st.Close()
	if oc.atKill, err = st.applied(ctx); err != nil {
		return oc, err
	}
	fmt.Fprintf(out, "killed the receiver with %d of %d deposits applied and %d acks lost\n", oc.atKill, total, lost.Hits())

	// 3. The rest, and a second receiver that runs to the end.
	if err := publish(ctx, p, cfg.accounts, 2*third+1, cfg.deposits); err != nil {
		return oc, err
	}
	if err := receiver().Run(); err != nil {
		return oc, fmt.Errorf("the second receiver: %w", err)
	}

	if oc.report, err = st.report(ctx); err != nil {
		return oc, err
	}
	return oc, check(oc.report, cfg, srv.Stats(sub.Name()), out)
}

// amount is the deposit number seq of account a: different for every
// deposit, so that a balance shows any deposit applied twice or missed.
func amount(a, seq int) int64 { return int64(100*seq + a) }

func account(a int) string { return fmt.Sprintf("acct-%02d", a) }

// publish publishes deposits first..last of every account, keyed by
// account, and waits for them. The publisher stamps each with its number
// in its sequence for the account.
func publish(ctx context.Context, p *publisher.Publisher, accounts, first, last int) error {
	var results []*publisher.Result
	for seq := first; seq <= last; seq++ {
		for a := 1; a <= accounts; a++ {
			results = append(results, p.Publish(ctx,
				&publisher.Message{Data: []byte(strconv.FormatInt(amount(a, seq), 10))},
				publisher.WithOrderingKey(account(a))))
		}
	}
	for _, r := range results {
		if _, err := r.Get(ctx); err != nil {
			return err
		}
	}
	return nil
}

// check compares the store with what was published, prints the result,
// and returns an error for anything applied twice or missing.
func check(rep report, cfg config, st orderingtest.Stats, out io.Writer) error {
	total := cfg.accounts * cfg.deposits
	var errs []error
	if len(rep.twice) > 0 {
		errs = append(errs, fmt.Errorf("applied more than once: %v", rep.twice))
	}
	if rep.applied != total {
		errs = append(errs, fmt.Errorf("%d deposits applied, want %d", rep.applied, total))
	}
	for a := 1; a <= cfg.accounts; a++ {
		var want int64
		for seq := 1; seq <= cfg.deposits; seq++ {
			want += amount(a, seq)
		}
		if got := rep.balances[account(a)]; got != want {
			errs = append(errs, fmt.Errorf("%s: balance %d, want %d", account(a), got, want))
		}
	}
	if rep.redelivered == 0 {
		errs = append(errs, errors.New("no applied deposit came back: the crash showed nothing"))
	}
	fmt.Fprintf(out, "%d deliveries of %d deposits; %d came back after they were applied and changed nothing\n",
		st.Delivered, total, rep.redelivered)
	if err := errors.Join(errs...); err != nil {
		return err
	}
	fmt.Fprintf(out, "every deposit applied exactly once; %d balances right\n", cfg.accounts)
	return nil
}

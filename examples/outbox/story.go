package main

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"syscall"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/keyorder/keyorder/internal/harness"
	"github.com/keyorder/keyorder/ordering"
	"github.com/keyorder/keyorder/ordering/orderingtest"
	"github.com/keyorder/keyorder/publisher/outbox"
	"github.com/keyorder/keyorder/subscriber"
	"github.com/keyorder/keyorder/subscriber/inbox"
)

const (
	topicID = "events"
	subID   = "events-inbox"
)

// config is what a run does.
type config struct {
	writers, changes, accounts int
	relays, replicas           int
	kills                      int           // SIGKILLs of a relay, and as many of a replica
	pace                       time.Duration // a writer's mean time between two changes
	chaosEvery                 time.Duration // mean time between two acts of chaos
	latency                    time.Duration // the server's answer to each Publish
	emulatorRedelivery         bool          // redeliver as Google's emulator does (orderingtest.WithEmulatorRedelivery)
	stampKey                   []byte        // the relays sign stamps with it, the replicas verify them; nil: unsigned (signed.go)
	forge                      bool          // publish forged stamps midway (signed.go); needs stampKey
	handOver                   bool          // a first replica hands over what it holds before applying any (handover.go)
	seed                       uint64
	source, sink               string // the databases (see openStore)
}

func defaultConfig() config {
	return config{writers: 3, changes: 150, accounts: 12, relays: 2, replicas: 2, kills: 2,
		pace: 30 * time.Millisecond, chaosEvery: 300 * time.Millisecond, seed: uint64(time.Now().UnixNano())}
}

func (c config) total() int { return c.writers * c.changes }

// role is one process of the story, as its flags gave it.
type role struct {
	name, addr, source, sink string
	id, accounts, changes    int
	pace                     time.Duration
	seed                     uint64
	stampKey                 []byte // signs (relay) or verifies (replica) the stamps; nil: unsigned
	handOver                 bool   // a replica that stops before applying anything (handover.go)
}

func (r role) run(ctx context.Context) error {
	dsn := r.source
	if r.name == "replica" {
		dsn = r.sink
	}
	st, err := openStore(dsn)
	if err != nil {
		return err
	}
	defer st.Close()
	switch r.name {
	case "writer", "relay":
		ob, err := outbox.New(ctx, st.db, st.outboxDialect())
		if err != nil {
			return err
		}
		if r.name == "writer" {
			return write(ctx, st, ob, r.seed, r.accounts, r.changes, r.pace)
		}
		opts := st.listener()
		if r.stampKey != nil {
			opts = append(opts, outbox.WithStampKey(r.stampKey))
		}
		return relay(ctx, r.addr, topicID, ob, opts...)
	case "replica":
		in, err := inbox.New(ctx, st.db, st.inboxDialect())
		if err != nil {
			return err
		}
		defer in.Close()
		if r.handOver {
			return handOver(ctx, r.addr, subID, r.stampKey, os.Stdout)
		}
		return replica(ctx, r.addr, subID, st, in, processName("replica", r.id), r.stampKey)
	}
	return fmt.Errorf("no role %q", r.name)
}

// proc is a process of the story that the chaos may kill and start again.
type proc struct {
	name  string
	start func() *exec.Cmd
	mu    sync.Mutex
	cmd   *exec.Cmd
	done  chan error
	kills int
}

func (p *proc) run() error {
	cmd := p.start()
	ready, w, err := os.Pipe()
	if err != nil {
		return fmt.Errorf("%s: %w", p.name, err)
	}
	defer ready.Close()
	cmd.ExtraFiles = append(cmd.ExtraFiles, w)
	if cmd.Env == nil {
		cmd.Env = os.Environ()
	}
	cmd.Env = append(cmd.Env, readyEnv+"="+strconv.Itoa(2+len(cmd.ExtraFiles)))
	err = cmd.Start()
	_ = w.Close()
	if err != nil {
		return fmt.Errorf("%s: %w", p.name, err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	// Wait until the process stops on SIGTERM rather than dies by it, or
	// has exited (the read ends at EOF), so that a stop right after a
	// start is a stop (a CI run saw a relay restarted after its SIGKILL
	// die by the SIGTERM that came before its handler).
	_ = ready.SetReadDeadline(time.Now().Add(time.Minute))
	_, _ = ready.Read(make([]byte, 1))
	p.mu.Lock()
	p.cmd, p.done = cmd, done
	p.mu.Unlock()
	return nil
}

// kill kills the process with SIGKILL, waits for it, and starts it again.
func (p *proc) kill() error {
	p.mu.Lock()
	cmd, done := p.cmd, p.done
	p.kills++
	p.mu.Unlock()
	_ = cmd.Process.Signal(syscall.SIGKILL)
	<-done
	return p.run()
}

// stop ends the process with SIGTERM and returns how it exited.
func (p *proc) stop() error {
	p.mu.Lock()
	cmd, done := p.cmd, p.done
	p.mu.Unlock()
	_ = cmd.Process.Signal(syscall.SIGTERM)
	if err := <-done; err != nil {
		return fmt.Errorf("%s: %w", p.name, err)
	}
	return nil
}

// outcome is what a run saw, for tests.
type outcome struct {
	report     report
	relayKills int
	replKills  int
	faults     map[string]int
	stored     int // messages the service stored: each event, and its copies
	forged     int // of those, forged (signed.go)
	delivered  int // deliveries: each stored message, and its redeliveries
}

// run tells the story of the package doc. spawn returns the command that
// starts a process of the story with the given flags.
func run(ctx context.Context, cfg config, spawn func(args ...string) *exec.Cmd, out io.Writer) (oc outcome, err error) {
	if err := harness.EmbeddedOnly("examples/outbox", "injects faults and makes a killed replica's leases run out in a second"); err != nil {
		return oc, err
	}
	opts := []orderingtest.Option{orderingtest.WithAckDeadline(time.Second)}
	if cfg.latency > 0 {
		opts = append(opts, orderingtest.WithLatency(cfg.latency))
	}
	if cfg.emulatorRedelivery {
		opts = append(opts, orderingtest.WithEmulatorRedelivery())
	}
	srv, err := orderingtest.New(opts...)
	if err != nil {
		return oc, err
	}
	defer srv.Close()
	subName, err := prepare(ctx, cfg, srv.Addr)
	if err != nil {
		return oc, err
	}
	// The first publish loses its response, whatever chaos later does:
	// the client sends it again, and every run stores copies for the
	// stamps and the inbox to skip (chaos's acts may all land where no
	// publish is under way, and store none).
	srv.LosePublishResponses(orderingtest.AnyMessage, codes.Unavailable, 1)
	procs := startAll(cfg, srv.Addr, spawn, out)
	defer func() {
		for _, p := range procs.all() {
			p.mu.Lock()
			if p.cmd != nil {
				_ = p.cmd.Process.Kill() // an error if it has exited
			}
			p.mu.Unlock()
		}
	}()
	if err := startProcs(ctx, procs); err != nil {
		return oc, err
	}
	sink, err := openStore(cfg.sink)
	if err != nil {
		return oc, err
	}
	defer sink.Close()

	chaosCtx, stopChaos := context.WithCancel(ctx)
	chaosDone := make(chan map[string]int, 1)
	go func() { chaosDone <- chaos(chaosCtx, cfg, srv, procs, out) }()
	topic := "projects/" + harness.ExampleProject() + "/topics/" + topicID
	forged := make(chan error, 1)
	if cfg.forge {
		go func() { forged <- forge(chaosCtx, cfg, srv, topic) }()
	} else {
		forged <- nil
	}
	err = waitEnd(ctx, cfg, procs, sink)
	stopChaos()
	oc.faults = <-chaosDone
	if err != nil {
		fmt.Fprintf(out, "chaos: %v\n", oc.faults)
		diagnose(cfg, srv, topic, subName, out)
	}
	if ferr := <-forged; err == nil && ferr != nil {
		err = ferr
	}
	if err == nil && cfg.forge {
		// The forged messages are dropped before the replicas stop.
		if werr := srv.WaitFor(ctx, func() bool { return forgedSettled(srv, topic, subName) }); werr != nil {
			err = fmt.Errorf("the forged messages were not all delivered and dropped: %w", werr)
		}
	}
	for _, p := range append(procs.relays, procs.replicas...) {
		if serr := p.stop(); serr != nil && err == nil {
			err = serr
		}
	}
	oc.relayKills, oc.replKills = kills(procs.relays), kills(procs.replicas)
	if err != nil {
		return oc, err
	}
	if oc.report, err = read(ctx, cfg); err != nil {
		return oc, err
	}
	stored := srv.Messages(topic)
	oc.stored = len(stored)
	if err := sentInOrder(stored); err != nil {
		return oc, err
	}
	if cfg.stampKey != nil {
		if oc.forged, err = signedRight(stored, cfg.stampKey); err != nil {
			return oc, err
		}
		fmt.Fprintf(out, "every event's stamp signed; %d forged messages stored, none verified\n", oc.forged)
	}
	oc.delivered = srv.Stats(subName).Delivered
	fmt.Fprintf(out, "%d changes by %d writers, %d messages stored, %d delivered; chaos: %v\n",
		cfg.total(), cfg.writers, oc.stored, oc.delivered, oc.faults)
	return oc, check(oc.report, cfg, out)
}

// prepare makes the topic, the ordered subscription and the databases'
// tables, before any process starts.
func prepare(ctx context.Context, cfg config, addr string) (subName string, err error) {
	client, err := harness.ConnectProject(ctx, addr, harness.ExampleProject())
	if err != nil {
		return "", err
	}
	defer client.Close()
	sub, err := subscriber.CreateWithTopic(ctx, client, topicID, subID)
	if err != nil {
		return "", err
	}
	return sub.Name(), prepareStores(ctx, cfg)
}

func prepareStores(ctx context.Context, cfg config) error {
	source, err := openStore(cfg.source)
	if err != nil {
		return err
	}
	defer source.Close()
	if err := source.createSource(ctx); err != nil {
		return err
	}
	if _, err := outbox.New(ctx, source.db, source.outboxDialect()); err != nil {
		return err
	}
	sink, err := openStore(cfg.sink)
	if err != nil {
		return err
	}
	defer sink.Close()
	if err := sink.createSink(ctx); err != nil {
		return err
	}
	in, err := inbox.New(ctx, sink.db, sink.inboxDialect())
	if err != nil {
		return err
	}
	return in.Close()
}

// procs is the story's processes by role.
type procs struct {
	writers, relays, replicas []*proc
	handOver                  *proc // the first replica, with -hand-over; nil without
}

func (ps procs) all() []*proc {
	all := append(append(append([]*proc(nil), ps.replicas...), ps.relays...), ps.writers...)
	if ps.handOver != nil {
		all = append(all, ps.handOver)
	}
	return all
}

// startProcs starts the story's processes. With a hand-over, the first
// replica starts alone, and the others once it has handed over.
func startProcs(ctx context.Context, ps procs) error {
	if ps.handOver == nil {
		for _, p := range ps.all() {
			if err := p.run(); err != nil {
				return err
			}
		}
		return nil
	}
	for _, p := range append(append([]*proc{ps.handOver}, ps.relays...), ps.writers...) {
		if err := p.run(); err != nil {
			return err
		}
	}
	ps.handOver.mu.Lock()
	done := ps.handOver.done
	ps.handOver.mu.Unlock()
	select {
	case err := <-done:
		if err != nil {
			return fmt.Errorf("%s: %w", ps.handOver.name, err)
		}
	case <-ctx.Done():
		return fmt.Errorf("%s did not hand over: %w", ps.handOver.name, ctx.Err())
	}
	for _, p := range ps.replicas {
		if err := p.run(); err != nil {
			return err
		}
	}
	return nil
}

func startAll(cfg config, addr string, spawn func(args ...string) *exec.Cmd, out io.Writer) procs {
	mk := func(name string, id int, extra ...string) *proc {
		args := append([]string{name, "-id", strconv.Itoa(id), "-addr", addr}, extra...)
		return &proc{name: name + " " + strconv.Itoa(id), start: func() *exec.Cmd {
			cmd := spawn(args...)
			cmd.Stdout, cmd.Stderr = out, out
			if cmd.Env == nil {
				cmd.Env = os.Environ()
			}
			cmd.Env = append(cmd.Env, sourceEnv+"="+cfg.source, sinkEnv+"="+cfg.sink)
			if cfg.stampKey != nil && name != "writer" {
				cmd.Env = append(cmd.Env, stampKeyEnv+"="+hex.EncodeToString(cfg.stampKey))
			}
			if cfg.emulatorRedelivery && name == "replica" {
				// A subscriber told it is on an emulator knows that a
				// key's messages may come back out of order.
				cmd.Env = append(cmd.Env, "PUBSUB_EMULATOR_HOST="+addr)
			}
			return cmd
		}}
	}
	var ps procs
	for i := 1; i <= cfg.replicas; i++ {
		ps.replicas = append(ps.replicas, mk("replica", i))
	}
	if cfg.handOver {
		ps.handOver = mk("replica", 0, "-hand-over")
	}
	for i := 1; i <= cfg.relays; i++ {
		ps.relays = append(ps.relays, mk("relay", i))
	}
	for i := 1; i <= cfg.writers; i++ {
		ps.writers = append(ps.writers, mk("writer", i, "-accounts", strconv.Itoa(cfg.accounts),
			"-changes", strconv.Itoa(cfg.changes), "-pace", cfg.pace.String(), "-seed", strconv.FormatUint(cfg.seed+uint64(i), 10)))
	}
	return ps
}

func kills(ps []*proc) (n int) {
	for _, p := range ps {
		p.mu.Lock()
		n += p.kills
		p.mu.Unlock()
	}
	return n
}

// waitEnd waits for every writer to exit 0, then for the receivers to
// have applied every event.
func waitEnd(ctx context.Context, cfg config, ps procs, sink *store) error {
	for _, w := range ps.writers {
		w.mu.Lock()
		done := w.done
		w.mu.Unlock()
		select {
		case err := <-done:
			if err != nil {
				return fmt.Errorf("%s: %w", w.name, err)
			}
		case <-ctx.Done():
			return fmt.Errorf("%s did not finish: %w", w.name, ctx.Err())
		}
	}
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		n, err := sink.applied(ctx)
		if err == nil && n >= cfg.total() {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%d of %d events applied: %w", n, cfg.total(), errors.Join(ctx.Err(), err))
		case <-tick.C:
		}
	}
}

// chaos, until ctx ends, does one act every cfg.chaosEvery on average: a
// SIGKILL of a relay or a replica (cfg.kills of each at most), or a fault
// of the server. It goes through the acts in rounds, each in an order of
// its own, so that every act comes once in each round. It returns how
// many of each it did.
func chaos(ctx context.Context, cfg config, srv *orderingtest.Server, ps procs, out io.Writer) map[string]int {
	rng := rand.New(rand.NewPCG(cfg.seed, 7))
	done := map[string]int{}
	acts := []struct {
		name string
		do   func() error
	}{
		{"kill relay", func() error { return killOne(rng, ps.relays, cfg.kills) }},
		{"kill replica", func() error { return killOne(rng, ps.replicas, cfg.kills) }},
		{"fail publish", func() error { srv.FailPublish(orderingtest.AnyMessage, codes.PermissionDenied, 1); return nil }},
		{"lose publish response", func() error {
			srv.LosePublishResponses(orderingtest.AnyMessage, codes.Unavailable, 1)
			return nil
		}},
		{"drop acks", func() error { srv.DropAcks(orderingtest.AnyMessage, 3); return nil }},
		{"duplicate deliveries", func() error { srv.DuplicateDeliveries(orderingtest.AnyMessage, 3); return nil }},
	}
	for i := 0; ; i++ {
		if i%len(acts) == 0 {
			rng.Shuffle(len(acts), func(i, j int) { acts[i], acts[j] = acts[j], acts[i] })
		}
		wait := time.Duration(rng.Int64N(int64(2 * cfg.chaosEvery)))
		select {
		case <-ctx.Done():
			return done
		case <-time.After(wait):
		}
		act := acts[i%len(acts)]
		if err := act.do(); err != nil {
			if !errors.Is(err, errEnough) {
				fmt.Fprintf(out, "chaos: %s: %v\n", act.name, err)
			}
			continue
		}
		done[act.name]++
	}
}

var errEnough = errors.New("enough kills")

func killOne(rng *rand.Rand, ps []*proc, most int) error {
	if len(ps) == 0 || kills(ps) >= most {
		return errEnough
	}
	return ps[rng.IntN(len(ps))].kill()
}

// sentInOrder checks what the relays sent: per key, the first copy of each
// event stored in its number's order, every number from 1 on. A copy may
// come anywhere after the first. Forged messages are not the relays'.
func sentInOrder(stored []orderingtest.Message) error {
	next := map[string]uint64{}
	var errs []error
	for _, m := range stored {
		st, err := ordering.ParseStamp(m.Attributes)
		if err != nil || st.IsZero() {
			return fmt.Errorf("message %d of %s: no stamp: %v", m.Seq, m.OrderingKey, err)
		}
		if isForged(m) {
			continue // not the relays' (signed.go)
		}
		_, n := ordering.SplitSeq(st.Seq)
		switch want := next[m.OrderingKey] + 1; {
		case uint64(n) == want:
			next[m.OrderingKey] = want
		case uint64(n) > want:
			errs = append(errs, fmt.Errorf("%s: event %d stored before event %d", m.OrderingKey, n, want))
		}
	}
	return errors.Join(errs...)
}

// Command outbox tells the whole story of exactly-once, in-order effects
// across services that crash: a transactional outbox on the writers' side,
// an inbox on the receivers', and keyorder between them.
//
// Writer processes change accounts in their database, each change in one
// transaction with its event (outbox.Add). Two relay processes publish
// the events, key by key in commit order, stamped with the outbox's
// producer ID and each row's number (outbox.Relay). Two receiver replicas
// apply them to their own database through the inbox (inbox.Handler),
// which commits each effect together with the record that it was applied.
//
// Meanwhile the story does its worst: it kills a relay and a replica with
// SIGKILL at random points and starts them again, so that keys move
// between replicas and a relay's last publishes are sent again; it makes
// the server fail publishes, lose publish responses (so that the service
// stores events twice), drop acks (so that applied events come back) and
// deliver events twice.
//
// At the end it checks the receivers' journal against the writers'
// accounts: every event applied exactly once, in commit order per
// account, with nothing lost, and every balance right. It exits non-zero
// if any of that does not hold.
//
// With -stamp-key, the relays sign every stamp and the replicas verify
// them, and -forge publishes forged stamps midway, which must change
// nothing; with -hand-over, a first replica receives events and hands
// them over before applying any.
//
//	go run ./examples/outbox                  # on SQLite files
//	go run ./examples/outbox -postgres DSN    # on a PostgreSQL server
//	go run ./examples/outbox -stamp-key $(openssl rand -hex 32) -forge
//
// Everything runs on an embedded ordering/orderingtest server.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"syscall"
	"time"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "-role" {
		os.Exit(roleMain(os.Args[1:], os.Stderr))
	}
	cfg := defaultConfig()
	flag.IntVar(&cfg.writers, "writers", cfg.writers, "writer processes")
	flag.IntVar(&cfg.changes, "changes", cfg.changes, "changes per writer")
	flag.IntVar(&cfg.accounts, "accounts", cfg.accounts, "accounts, one ordering key each")
	flag.BoolVar(&cfg.emulatorRedelivery, "emulator-redelivery", false, "redeliver as Google's emulator does: a nacked or expired message by itself, in nack order")
	stampKey := flag.String("stamp-key", "", "a key in hex, at least 16 bytes, to sign the stamps with (relays) and verify them (replicas)")
	flag.BoolVar(&cfg.forge, "forge", false, "publish forged stamps midway, which the replicas must drop (needs -stamp-key)")
	flag.BoolVar(&cfg.handOver, "hand-over", false, "start a replica that hands over the events it holds before applying any")
	postgres := flag.String("postgres", "", "a PostgreSQL DSN to use (two schemas of it) instead of SQLite files")
	flag.Parse()
	exe, err := os.Executable()
	if err == nil {
		cfg.stampKey, err = parseStampKey(*stampKey)
	}
	if err == nil && cfg.forge && cfg.stampKey == nil {
		err = errors.New("-forge needs -stamp-key: without signatures, a forged stamp is taken on trust")
	}
	if err == nil {
		err = runMain(cfg, *postgres, exe)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "outbox:", err)
		os.Exit(1)
	}
}

func runMain(cfg config, postgres, exe string) error {
	dir, err := os.MkdirTemp("", "outbox-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	cfg.source, cfg.sink = filepath.Join(dir, "writers.db"), filepath.Join(dir, "receivers.db")
	if postgres != "" {
		// One database stands for both services here; their tables do
		// not meet.
		cfg.source, cfg.sink = "postgres:"+postgres, "postgres:"+postgres
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	spawn := func(args ...string) *exec.Cmd {
		return exec.CommandContext(ctx, exe, append([]string{"-role"}, args...)...)
	}
	_, err = run(ctx, cfg, spawn, os.Stdout)
	return err
}

// sourceEnv and sinkEnv carry the databases' DSNs (see openStore) to the
// story's processes.
const (
	sourceEnv = "KEYORDER_OUTBOX_SOURCE"
	sinkEnv   = "KEYORDER_OUTBOX_SINK"
	// readyEnv names the file descriptor on which a process of the story
	// tells that it now stops on SIGTERM (signalReady).
	readyEnv = "KEYORDER_OUTBOX_READY_FD"
)

// roleMain runs one process of the story: a writer, a relay or a replica.
// Relays and replicas run until SIGTERM (or -timeout) and exit 0.
func roleMain(args []string, log io.Writer) int {
	fs := flag.NewFlagSet("outbox -role", flag.ContinueOnError)
	fs.SetOutput(log)
	var r role
	fs.StringVar(&r.name, "role", "", "writer, relay or replica")
	fs.StringVar(&r.addr, "addr", "", "address of the Pub/Sub server")
	fs.IntVar(&r.id, "id", 0, "this process's number among its role")
	fs.IntVar(&r.accounts, "accounts", 0, "accounts (writer)")
	fs.IntVar(&r.changes, "changes", 0, "changes to make (writer)")
	fs.DurationVar(&r.pace, "pace", 0, "the writer's mean time between two changes")
	fs.Uint64Var(&r.seed, "seed", 1, "the writer's random seed")
	fs.BoolVar(&r.handOver, "hand-over", false, "a replica that hands over the events it holds before applying any")
	timeout := fs.Duration("timeout", 4*time.Minute, "give up after this long")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	// The databases, whose DSNs may hold passwords, come through the
	// environment: a command line is any local user's to read.
	r.source, r.sink = os.Getenv(sourceEnv), os.Getenv(sinkEnv)
	key, err := parseStampKey(os.Getenv(stampKeyEnv))
	if err != nil {
		fmt.Fprintf(log, "outbox %s %d: %v\n", r.name, r.id, err)
		return 2
	}
	r.stampKey = key
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	ctx, stop := signal.NotifyContext(ctx, syscall.SIGTERM, os.Interrupt)
	defer stop()
	signalReady()
	if err := r.run(ctx); err != nil {
		if r.name != "writer" && ctx.Err() != nil && errors.Is(err, ctx.Err()) {
			return 0 // stopped before it ran: while it connected, say
		}
		fmt.Fprintf(log, "outbox %s %d: %v\n", r.name, r.id, err)
		return 1
	}
	return 0
}

// signalReady tells the story, on the file it passed, that this process
// now stops on SIGTERM: before, a SIGTERM would kill it by the signal's
// default action, as a crash.
func signalReady() {
	fd, err := strconv.Atoi(os.Getenv(readyEnv))
	if err != nil {
		return // not started by the story
	}
	f := os.NewFile(uintptr(fd), "ready")
	_, _ = f.Write([]byte{1})
	_ = f.Close()
}

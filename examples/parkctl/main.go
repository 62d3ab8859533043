// Command parkctl is an operator's tool for the keys a subscription parks
// (subscriber.WithParking): it lists them, releases one, and replays a
// topic's history to stdout as JSON lines.
//
// parkctl runs no Receive, and so no handler: a release is a request
// recorded in the subscription's parking control log, which a Receive of
// the subscription, on any process (the service that parked the key),
// carries out through its handler, in the order the messages were parked,
// while parkctl waits for the outcome.
//
//	parkctl [-project P] -sub SUB -parking TOPIC list
//	parkctl [-project P] -sub SUB -parking TOPIC release [-timeout D] [-wait=false] KEY
//	parkctl [-project P] replay [-from T | -since D] [-quiet D] TOPIC
//
// SUB and TOPIC are IDs or full names; -parking names the topic the
// service parks to, as its WithParking does. parkctl connects to the
// emulator PUBSUB_EMULATOR_HOST names (project keyorder-test unless
// -project or GOOGLE_CLOUD_PROJECT says otherwise), or else to Google
// Cloud, with the application default credentials, in the project -project
// or GOOGLE_CLOUD_PROJECT names. An operator's tool has nothing to look at
// in a server of its own, so, unlike the other examples, it starts none.
//
// # list
//
// One line per parked key, oldest first: when it was parked, the messages
// parked and not released yet, its state (parked; releasing, on some
// process; release requested, when and by whom, until it is carried out),
// the message that parked it or failed again in a release, and that
// message's last error.
//
// # release
//
// Asks for KEY's release and waits, at most -timeout (default 5m), until a
// Receive of the subscription has run its parked messages and unparked it.
// It exits 1, the key staying parked, if a released message fails for
// good again (the fix is not in yet), if the key is not parked, or if the
// timeout passes first: the request then stays recorded, and a Receive
// that runs, or starts, carries it out; list shows it meanwhile. With
// -wait=false it returns once the request is recorded.
//
// # replay
//
// Writes every message TOPIC retains from -from (RFC 3339) or -since (a
// duration before now), by default the oldest retained, up to now, as one
// JSON object a line, once each, in publish order per key; the lines of
// different keys interleave. It uses subscriber.Replay, on a subscription
// of its own that it deletes, and ends once nothing has arrived for -quiet
// (default 10s). The topic must retain messages. An object has:
//
//	id            the message ID
//	key           its ordering key; absent if it has none
//	publish_time  when the service stored it, RFC 3339 with nanoseconds
//	producer, seq its keyorder stamp, seq as epoch.n; absent if unstamped
//	attributes    its attributes, less the stamp; absent if none
//	data          its data, when it is valid UTF-8
//	data_base64   its data in standard base64, when it is not
//
// Replaying the parking topic shows what is parked, with the attributes
// keyorder adds (keyorder-park-id, keyorder-message-id, keyorder-error...).
//
// # Exit status
//
// 0 when what was asked is done, 1 when it cannot be, 2 for a usage error.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// Exit statuses.
const (
	exitOK    = 0
	exitFail  = 1 // what was asked cannot be done
	exitUsage = 2
)

// usage is the synopsis printed with a usage error.
const usage = `usage:
  parkctl [-project P] -sub SUB -parking TOPIC list
  parkctl [-project P] -sub SUB -parking TOPIC release [-timeout D] [-wait=false] KEY
  parkctl [-project P] replay [-from T | -since D] [-quiet D] TOPIC
`

// run runs the command args, writing what it reports to out and errors to
// errOut, and returns the exit status.
func run(ctx context.Context, args []string, out, errOut io.Writer) int {
	fs := flag.NewFlagSet("parkctl", flag.ContinueOnError)
	fs.SetOutput(errOut)
	fs.Usage = func() {
		fmt.Fprint(errOut, usage)
		fs.PrintDefaults()
	}
	project := fs.String("project", "", "the project (default $GOOGLE_CLOUD_PROJECT; on an emulator, keyorder-test)")
	sub := fs.String("sub", "", "the subscription whose parked keys to list or release")
	parking := fs.String("parking", "", "the subscription's parking topic, as its WithParking names it")
	if err := fs.Parse(args); err != nil {
		return exitUsage
	}
	if fs.NArg() == 0 {
		fs.Usage()
		return exitUsage
	}
	c := &command{project: *project, sub: *sub, parking: *parking, out: out, errOut: errOut}
	cmd, rest := fs.Arg(0), fs.Args()[1:]
	switch cmd {
	case "list":
		return c.list(ctx, rest)
	case "release":
		return c.release(ctx, rest)
	case "replay":
		return c.replay(ctx, rest)
	}
	fmt.Fprintf(errOut, "parkctl: unknown command %q\n", cmd)
	fs.Usage()
	return exitUsage
}

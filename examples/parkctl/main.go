// Command parkctl is an operator's tool for the keys a subscription parks
// (subscriber.WithParking): it lists them, releases one, withdraws a
// release asked for, and replays a topic's history to stdout as JSON
// lines.
//
// parkctl runs no Receive, and so no handler: a release is a request
// recorded in the subscription's parking control log, which a Receive of
// the subscription, on any process (the service that parked the key),
// carries out through its handler, in the order the messages were parked,
// while parkctl waits for the outcome.
//
//	parkctl list     -sub SUB [-parking TOPIC] [-json]
//	parkctl release  -sub SUB [-parking TOPIC] [-timeout D] [-wait=false] KEY
//	parkctl withdraw -sub SUB [-parking TOPIC] KEY
//	parkctl replay   [-from T | -since D] [-quiet D] TOPIC
//
// Flags go before or after the command and its argument; a key that
// starts with "-" follows "--". Every command also takes -project P and
// -reach D. SUB and TOPIC are IDs or full names; -parking, which may be
// left out when the subscription's keyorder-parking label records it by
// its ID (the first process that parks sets it), names the topic
// the service parks to, as its WithParking does. parkctl connects to
// the emulator PUBSUB_EMULATOR_HOST names (project keyorder-test unless
// -project or GOOGLE_CLOUD_PROJECT says otherwise), or else to Google
// Cloud, with the application default credentials, in the project
// -project or GOOGLE_CLOUD_PROJECT names. It gives the server -reach
// (default 5s) to answer its first call, then says that the server
// cannot be reached, rather than wait out a longer timeout in silence. An
// operator's tool has nothing to look at in a server of its own, so,
// unlike the other examples, it starts none.
//
// Keys, message IDs, errors and the names of askers are printed inert:
// quoted, with Go's escapes, when they hold anything but printable
// characters, so that a key holding terminal escapes cannot change the
// terminal or forge a line.
//
// # list
//
// A subscription that records no parking topic and has no control topic
// has never parked a key: list says it parks nothing. Otherwise, one line
// per parked key, oldest first: when it was parked, the messages
// parked and not released yet, its state (parked; releasing, on some
// process; release requested, when and by whom, until it is carried out),
// the message that parked it or failed again in a release, and that
// message's last error. With -json, one JSON object a line instead, with
// the fields key, parked_since, messages, releasing, message_id,
// last_error, and release_requested and release_requested_by when a
// release is pending.
//
// # release
//
// Asks for KEY's release and waits, at most -timeout (default 5m), until a
// Receive of the subscription has run its parked messages and unparked it,
// saying on stderr how it goes, a line every few seconds (3 s) while it
// waits: the request recorded; waiting for a Receive to claim it, and for
// how long; claimed, with the messages left. Each look gets -reach to be
// answered: a server lost during the wait is reported as unreachable
// within about -reach, and the wait still ends by -timeout. It exits 1,
// the key staying parked, if a released message fails for good again
// (the fix is not in yet), if the request is withdrawn, if the key is not
// parked (saying so, or that an earlier release unparked it within the
// last hour, its messages run), or if the timeout passes first: the
// request then stays recorded, and a Receive that runs, or starts,
// carries it out; list shows it meanwhile, and withdraw withdraws it.
// With -wait=false it returns once the request is recorded.
//
// # withdraw
//
// Withdraws the release request pending on KEY, which stays parked. A
// release that a Receive has begun cannot be withdrawn: parkctl says so.
//
// # replay
//
// Writes every message TOPIC retains from -from (RFC 3339) or -since (a
// duration before now, more than 0), by default the oldest retained, up
// to now, as one JSON object a line, once each, in publish order per key;
// the lines of different keys interleave. It uses subscriber.Replay, on a
// subscription of its own that it deletes, also when its output closes
// (parkctl replay ... | head), and ends once nothing has arrived for
// -quiet (default 10s). The topic must retain messages
// (subscriber.SetTopicRetention gives it retention). An object has:
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
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	// A write to a closed stdout (parkctl replay | head) then fails with
	// EPIPE, which replay turns into a clean end, instead of killing the
	// process before it deletes its subscription.
	signal.Ignore(syscall.SIGPIPE)
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
  parkctl list     -sub SUB [-parking TOPIC] [-json]
  parkctl release  -sub SUB [-parking TOPIC] [-timeout D] [-wait=false] KEY
  parkctl withdraw -sub SUB [-parking TOPIC] KEY
  parkctl replay   [-from T | -since D] [-quiet D] TOPIC
every command also takes -project P (default $GOOGLE_CLOUD_PROJECT) and -reach D (default 5s)
`

// run runs the command args, writing what it reports to out and progress
// and errors to errOut, and returns the exit status.
func run(ctx context.Context, args []string, out, errOut io.Writer) int {
	c := &command{out: out, errOut: errOut}
	pos, code := c.parse(args)
	if code != exitOK {
		return code
	}
	cmd, rest := pos[0], pos[1:]
	switch cmd {
	case "list":
		return c.list(ctx, rest)
	case "release":
		return c.release(ctx, rest)
	case "withdraw":
		return c.withdraw(ctx, rest)
	case "replay":
		return c.replay(ctx, rest)
	}
	return c.usageError("unknown command %q", cmd)
}

// fail reports what cannot be done and returns exitFail. The strings and
// errors among args are printed with their control characters escaped.
func (c *command) fail(format string, args ...any) int {
	fmt.Fprintf(c.errOut, "parkctl: "+format+"\n", inertArgs(args)...)
	return exitFail
}

// usageError reports a usage error, with the synopsis, and returns
// exitUsage.
func (c *command) usageError(format string, args ...any) int {
	fmt.Fprintf(c.errOut, "parkctl: "+format+"\n%s", append(inertArgs(args), usage)...)
	return exitUsage
}

package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"cloud.google.com/go/pubsub/v2"
	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/keyorder/keyorder/internal/harness"
	"github.com/keyorder/keyorder/subscriber"
)

// A command is one run of parkctl: the global flags and where it writes.
type command struct {
	project, sub, parking string
	out, errOut           io.Writer
}

// fail reports err and returns exitFail.
func (c *command) fail(format string, args ...any) int {
	fmt.Fprintf(c.errOut, "parkctl: "+format+"\n", args...)
	return exitFail
}

// usageError reports a usage error and returns exitUsage.
func (c *command) usageError(format string, args ...any) int {
	fmt.Fprintf(c.errOut, "parkctl: "+format+"\n%s", append(args, usage)...)
	return exitUsage
}

// connect returns a client of the emulator PUBSUB_EMULATOR_HOST names, or
// of Google Cloud; the official client reads the variable itself.
func (c *command) connect(ctx context.Context) (*pubsub.Client, error) {
	project := c.project
	if project == "" {
		project = os.Getenv("GOOGLE_CLOUD_PROJECT")
	}
	if project == "" && os.Getenv(harness.EmulatorEnv) != "" {
		project = harness.Project // the examples' project
	}
	if project == "" {
		return nil, errors.New("no project: set -project or GOOGLE_CLOUD_PROJECT")
	}
	return pubsub.NewClient(ctx, project)
}

// open connects and opens the subscription with its parking topic, for
// the command cmd. It returns the exit status, not exitOK, if it cannot.
func (c *command) open(ctx context.Context, cmd string) (*subscriber.Subscription, func(), int) {
	if c.sub == "" || c.parking == "" {
		return nil, nil, c.usageError("%s: -sub and -parking are required", cmd)
	}
	sub, closeAll, err := c.openSubscription(ctx)
	if err != nil {
		return nil, nil, c.fail("%s: %v", cmd, err)
	}
	return sub, closeAll, exitOK
}

// openSubscription connects and opens the subscription with its parking
// topic, which must exist: Open would create a missing one, and a
// mistyped name would then show nothing parked.
func (c *command) openSubscription(ctx context.Context) (*subscriber.Subscription, func(), error) {
	client, err := c.connect(ctx)
	if err != nil {
		return nil, nil, err
	}
	topic := c.parking
	if !strings.HasPrefix(topic, "projects/") {
		topic = "projects/" + client.Project() + "/topics/" + topic
	}
	if _, err := client.TopicAdminClient.GetTopic(ctx, &pubsubpb.GetTopicRequest{Topic: topic}); err != nil {
		_ = client.Close()
		if status.Code(err) == codes.NotFound {
			return nil, nil, fmt.Errorf("no parking topic %s: -parking must name the topic the subscription parks to", topic)
		}
		return nil, nil, err
	}
	sub, err := subscriber.Open(ctx, client, c.sub, subscriber.WithParking(c.parking))
	if err != nil {
		_ = client.Close()
		return nil, nil, err
	}
	return sub, func() { _ = client.Close() }, nil
}

// list prints the parked keys.
func (c *command) list(ctx context.Context, args []string) int {
	if len(args) > 0 {
		return c.usageError("list takes no arguments")
	}
	sub, closeAll, code := c.open(ctx, "list")
	if code != exitOK {
		return code
	}
	defer closeAll()
	keys, err := sub.Parked(ctx)
	if err != nil {
		return c.fail("list: %v", err)
	}
	if len(keys) == 0 {
		fmt.Fprintf(c.out, "no key of %s is parked\n", sub.Name())
		return exitOK
	}
	now := time.Now()
	w := tabwriter.NewWriter(c.out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "KEY\tPARKED SINCE\tMESSAGES\tSTATE\tMESSAGE\tLAST ERROR")
	for _, k := range keys {
		fmt.Fprintf(w, "%s\t%s (%s ago)\t%d\t%s\t%s\t%s\n", k.Key, k.Since.UTC().Format(time.RFC3339),
			now.Sub(k.Since).Round(time.Second), k.Messages, state(k, now), k.MessageID, oneLine(k.LastError))
	}
	if err := w.Flush(); err != nil {
		return c.fail("list: %v", err)
	}
	return exitOK
}

// state says where the release of k stands.
func state(k subscriber.ParkedKey, now time.Time) string {
	s := "parked"
	if k.Releasing {
		s = "releasing"
	}
	if !k.ReleaseRequested.IsZero() {
		s += fmt.Sprintf(", release requested %s ago by %s", now.Sub(k.ReleaseRequested).Round(time.Second), k.ReleaseRequestedBy)
	}
	return s
}

// oneLine keeps an error on its table line.
func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }

// release asks for a key's release and, unless -wait=false, waits for it.
func (c *command) release(ctx context.Context, args []string) int {
	fs := flag.NewFlagSet("release", flag.ContinueOnError)
	fs.SetOutput(c.errOut)
	timeout := fs.Duration("timeout", 5*time.Minute, "how long to wait for the release")
	wait := fs.Bool("wait", true, "wait until the key is released; with false, return once the request is recorded")
	if err := fs.Parse(args); err != nil {
		return exitUsage
	}
	if fs.NArg() != 1 {
		return c.usageError("release takes one key")
	}
	key := fs.Arg(0)
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	sub, closeAll, code := c.open(ctx, "release")
	if code != exitOK {
		return code
	}
	defer closeAll()
	if !*wait {
		if err := sub.RequestRelease(ctx, key); err != nil {
			return c.fail("release of %q: %v", key, err)
		}
		fmt.Fprintf(c.out, "release of %q requested: a Receive of %s carries it out\n", key, sub.Name())
		return exitOK
	}
	switch err := sub.Release(ctx, key); {
	case err == nil:
		fmt.Fprintf(c.out, "released %q: its parked messages ran, in order, and it is unparked\n", key)
		return exitOK
	case errors.Is(err, subscriber.ErrParkedAgain):
		return c.fail("%v\nthe key stays parked; release it again once the cause is fixed", err)
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
		return c.fail("release of %q: not carried out (%v, -timeout %v); the request stays recorded, for a Receive of %s to carry out (parkctl list shows it)", key, err, *timeout, sub.Name())
	default:
		return c.fail("release of %q: %v", key, err)
	}
}

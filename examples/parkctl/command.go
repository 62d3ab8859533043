package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"

	"cloud.google.com/go/pubsub/v2"
	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/keyorder/keyorder/internal/harness"
	"github.com/keyorder/keyorder/subscriber"
)

// A command is one run of parkctl: its flags and where it writes.
type command struct {
	f           flags
	out, errOut io.Writer
}

// connect returns a client of the emulator PUBSUB_EMULATOR_HOST names, or
// of Google Cloud; the official client reads the variable itself.
func (c *command) connect(ctx context.Context) (*pubsub.Client, error) {
	project := c.f.project
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

// server names the server parkctl talks to, for a person to read.
func server() string {
	if addr := os.Getenv(harness.EmulatorEnv); addr != "" {
		return addr + " (" + harness.EmulatorEnv + ")"
	}
	return "pubsub.googleapis.com"
}

// reach makes parkctl's first call, which gets -reach to be answered: the
// official client retries an unreachable server until the call's context
// ends, so without this bound parkctl would wait out -timeout in silence.
func (c *command) reach(ctx context.Context, call func(ctx context.Context) error) error {
	rctx, cancel := context.WithTimeout(ctx, c.f.reach)
	defer cancel()
	err := call(rctx)
	if err == nil || ctx.Err() != nil {
		return err
	}
	if code := status.Code(err); rctx.Err() != nil || code == codes.Unavailable || code == codes.DeadlineExceeded {
		return fmt.Errorf("cannot reach the Pub/Sub server at %s: no answer within -reach %v (%v)", server(), c.f.reach, err)
	}
	return err
}

// names returns the full names of the subscription, its parking topic and
// its control topic, in client's project.
func (c *command) names(client *pubsub.Client) (sub, parking, control string) {
	full := func(kind, id string) string {
		if strings.HasPrefix(id, "projects/") {
			return id
		}
		return "projects/" + client.Project() + "/" + kind + "/" + id
	}
	sub = full("subscriptions", c.f.sub)
	_, subID, _ := strings.Cut(sub, "/subscriptions/")
	// The control topic keyorder names after the subscription.
	control = full("topics", subID+"-parking-control")
	return sub, full("topics", c.f.parking), control
}

// open connects and opens the subscription with its parking topic, for
// the command cmd. It returns the exit status, not exitOK, if it cannot.
func (c *command) open(ctx context.Context, cmd string) (*subscriber.Subscription, func(), int) {
	if c.f.sub == "" {
		return nil, nil, c.usageError("%s: -sub is required", cmd)
	}
	client, err := c.connect(ctx)
	if err != nil {
		return nil, nil, c.fail("%s: %v", cmd, err)
	}
	sub, err := c.openSubscription(ctx, client)
	if err != nil {
		_ = client.Close()
		return nil, nil, c.fail("%s: %v", cmd, err)
	}
	return sub, func() { _ = client.Close() }, exitOK
}

// openSubscription checks, in that order, that the server answers, that
// the subscription exists in the project, and that its control topic
// and -parking's topic do, so that each mistake is named as what it is:
// Open would create missing topics, and a mistyped name would then show
// nothing parked.
func (c *command) openSubscription(ctx context.Context, client *pubsub.Client) (*subscriber.Subscription, error) {
	subName, parking, control := c.names(client)
	var got *pubsubpb.Subscription
	err := c.reach(ctx, func(ctx context.Context) (err error) {
		got, err = client.SubscriptionAdminClient.GetSubscription(ctx, &pubsubpb.GetSubscriptionRequest{Subscription: subName})
		return err
	})
	if status.Code(err) == codes.NotFound {
		return nil, fmt.Errorf("no subscription %s: check -sub, and the project (-project or GOOGLE_CLOUD_PROJECT)", subName)
	}
	if err != nil {
		return nil, err
	}
	if c.f.parking == "" {
		if c.f.parking, err = parkingOf(got); err != nil {
			return nil, parksNothing(ctx, client, got, control, err)
		}
		subName, parking, control = c.names(client)
	}
	if err := c.checkParking(ctx, client, got, parking, control); err != nil {
		return nil, err
	}
	// parkctl serves no push request: a push subscription's authentication
	// is the service's business, and its warnings are not the operator's.
	opts := []subscriber.Option{subscriber.WithParking(c.f.parking), subscriber.WithLogger(slog.New(slog.DiscardHandler))}
	if pc := got.GetPushConfig(); pc.GetPushEndpoint() != "" && pc.GetOidcToken() == nil {
		opts = append(opts, subscriber.WithUnauthenticatedPush())
	}
	return subscriber.Open(ctx, client, subName, opts...)
}

// checkParking checks that sub parks: its control topic exists, and
// -parking names another topic that exists.
func (c *command) checkParking(ctx context.Context, client *pubsub.Client, sub *pubsubpb.Subscription, parking, control string) error {
	switch parking {
	case control:
		return fmt.Errorf("-parking %s is the subscription's control topic: name the topic its WithParking names", parking)
	case sub.GetTopic():
		return fmt.Errorf("-parking %s is the topic the subscription reads: name the topic its WithParking names", parking)
	}
	exists := func(topic string) (bool, error) { return topicExists(ctx, client, topic) }
	switch ok, err := exists(control); {
	case err != nil:
		return err
	case !ok:
		return fmt.Errorf("%s has never parked a key: no control topic %s (is it received with WithParking?)", sub.GetName(), control)
	}
	switch ok, err := exists(parking); {
	case err != nil:
		return err
	case !ok:
		return fmt.Errorf("no parking topic %s: -parking must name the topic the subscription parks to", parking)
	}
	return nil
}

// topicExists reports whether topic exists.
func topicExists(ctx context.Context, client *pubsub.Client, topic string) (bool, error) {
	_, err := client.TopicAdminClient.GetTopic(ctx, &pubsubpb.GetTopicRequest{Topic: topic})
	if status.Code(err) == codes.NotFound {
		return false, nil
	}
	return err == nil, err
}

// parksNothing returns the error for sub, whose label names no parking
// topic it can use (err): if it has no label and no control topic either,
// no process ever parked a key of it, and the error says it parks
// nothing, rather than only asking for -parking.
func parksNothing(ctx context.Context, client *pubsub.Client, sub *pubsubpb.Subscription, control string, err error) error {
	if _, labelled := sub.GetLabels()[subscriber.LabelParking]; labelled {
		return err
	}
	if has, cerr := topicExists(ctx, client, control); cerr != nil || has {
		return err
	}
	return fmt.Errorf("subscription %s parks nothing: no process has ever parked a key of it (it records no parking topic, label %s, and has no control topic %s); if its processes run with WithParking, give -parking",
		sub.GetName(), subscriber.LabelParking, control)
}

// oneArg checks that cmd was given exactly one argument, what.
func (c *command) oneArg(cmd, what string, args []string) (string, int) {
	if len(args) != 1 {
		return "", c.usageError("%s takes one %s, not %d arguments", cmd, what, len(args))
	}
	return args[0], exitOK
}

// parkingOf returns the parking topic sub records in its label
// (subscriber.LabelParking), which the first process that parks sets: the
// topic's ID, where it fits the service's rules for label values, or else
// a hash of its name, which cannot be read back.
func parkingOf(sub *pubsubpb.Subscription) (string, error) {
	label, ok := sub.GetLabels()[subscriber.LabelParking]
	switch {
	case !ok:
		return "", fmt.Errorf("subscription %s records no parking topic (label %s): no process has parked to it yet; give -parking", sub.GetName(), subscriber.LabelParking)
	case strings.HasPrefix(label, "sha256-"):
		return "", fmt.Errorf("subscription %s records its parking topic as a hash (label %s=%s), since the topic's name does not fit a label; give -parking", sub.GetName(), subscriber.LabelParking, label)
	}
	return label, nil
}

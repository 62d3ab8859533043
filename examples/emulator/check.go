package main

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"text/tabwriter"
	"time"

	"cloud.google.com/go/pubsub/v2"
	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/keyorder/keyorder/internal/harness"
)

// A probe tries one feature keyorder uses on a server, with topics and
// subscriptions of its own, and reports whether the server has it.
type probe struct {
	name string // the feature, as the server shows it
	uses string // what in keyorder needs it
	run  func(c *checker, ctx context.Context) (ok bool, detail string, err error)
	// wait, if set, is how long the probe waits on purpose, beyond
	// checkTimeout.
	wait *time.Duration
}

// probes are what -check tries, in order.
var probes = []probe{
	{"ordered subscriptions", "per-key order (S3)", (*checker).ordered, nil},
	{"topic message retention", "WithParking, Replay", (*checker).retention, nil},
	{"subscription filters", "WithParking (its control log and releases)", (*checker).filter, nil},
	{"a nack redelivers the key's tail", "S5: a failed key's later messages come again, in order", (*checker).tail, nil},
	{"dead-letter policy", "WithDeadLetterPolicy", (*checker).deadLetter, nil},
	{"exactly-once delivery", "WithExactlyOnce", (*checker).exactlyOnce, nil},
	{"keys come back after a consumer restart", "restarts, deploys, hand-overs", (*checker).restart, &restartBound},
	{"push requests carry an OIDC token", "WithPushAuth", (*checker).pushToken, nil},
	{"push requests carry the ordering key", "push on an ordered subscription", (*checker).pushKey, nil},
	// Last: pstest v2.9.0 fails on the pull after it (a nil pointer in
	// its maintainMessages), and stops answering.
	{"Seek to a time, ordered subscription", "WithParking, Replay", (*checker).seekOrdered, nil},
}

// checkTimeout bounds each probe: a server that does not answer by then
// lacks the feature, as far as keyorder is concerned. Tests shorten it.
var checkTimeout = 10 * time.Second

// check probes the server at addr with ps and prints a table of what it
// supports. It returns an error only if it cannot talk to the server.
func check(ctx context.Context, addr string, out io.Writer, ps []probe) error {
	client, err := harness.ConnectProject(ctx, addr, harness.ExampleProject())
	if err != nil {
		return err
	}
	defer client.Close()
	c := &checker{client: client, addr: addr, run: "check-" + strings.ToLower(rand.Text()[:8])}
	if _, err := c.topic(ctx, nil); err != nil {
		return fmt.Errorf("the server at %s does not create topics: %w", addr, err)
	}
	defer c.cleanup()
	fmt.Fprintf(out, "keyorder features on the server at %s:\n", addr)
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "feature\tsupported\tneeded by\tdetail")
	for _, p := range ps {
		d := checkTimeout
		if p.wait != nil {
			d += *p.wait
		}
		pctx, cancel := context.WithTimeout(ctx, d)
		ok, detail, err := p.run(c, pctx)
		cancel()
		if err != nil {
			ok, detail = false, err.Error()
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", p.name, yesNo(ok), p.uses, detail)
	}
	return tw.Flush()
}

func yesNo(ok bool) string {
	if ok {
		return "yes"
	}
	return "no"
}

// checker holds what the probes make, to delete it at the end.
type checker struct {
	client *pubsub.Client
	addr   string // the server's, for probes that need a client of their own
	run    string // prefix of this check's resource IDs
	n      int
	topics []string
	subs   []string
}

// connect returns a new client of the server, in the checker's project.
func (c *checker) connect(ctx context.Context) (*pubsub.Client, error) {
	return harness.ConnectProject(ctx, c.addr, c.client.Project())
}

func (c *checker) name(kind string) string {
	c.n++
	return fmt.Sprintf("projects/%s/%s/%s-%d", c.client.Project(), kind, c.run, c.n)
}

// topic creates a topic, shaped by edit if it is not nil.
func (c *checker) topic(ctx context.Context, edit func(*pubsubpb.Topic)) (string, error) {
	t := &pubsubpb.Topic{Name: c.name("topics")}
	if edit != nil {
		edit(t)
	}
	got, err := c.client.TopicAdminClient.CreateTopic(ctx, t)
	if err != nil {
		return "", err
	}
	c.topics = append(c.topics, got.Name)
	return got.Name, nil
}

// sub creates an ordered subscription of topic, shaped by edit.
func (c *checker) sub(ctx context.Context, topic string, edit func(*pubsubpb.Subscription)) (*pubsubpb.Subscription, error) {
	s := &pubsubpb.Subscription{Name: c.name("subscriptions"), Topic: topic, EnableMessageOrdering: true, AckDeadlineSeconds: 10}
	if edit != nil {
		edit(s)
	}
	got, err := c.client.SubscriptionAdminClient.CreateSubscription(ctx, s)
	if err != nil {
		return nil, err
	}
	c.subs = append(c.subs, got.Name)
	return got, nil
}

// cleanup deletes what the probes made.
func (c *checker) cleanup() {
	ctx, cancel := context.WithTimeout(context.Background(), checkTimeout)
	defer cancel()
	for _, s := range c.subs {
		_ = c.client.SubscriptionAdminClient.DeleteSubscription(ctx, &pubsubpb.DeleteSubscriptionRequest{Subscription: s})
	}
	for _, t := range c.topics {
		_ = c.client.TopicAdminClient.DeleteTopic(ctx, &pubsubpb.DeleteTopicRequest{Topic: t})
	}
}

// publish publishes one message per data to topic, with key, in order.
func (c *checker) publish(ctx context.Context, topic, key string, data ...string) error {
	msgs := make([]*pubsubpb.PubsubMessage, len(data))
	for i, d := range data {
		msgs[i] = &pubsubpb.PubsubMessage{Data: []byte(d), OrderingKey: key, Attributes: map[string]string{"probe": d}}
	}
	_, err := c.client.TopicAdminClient.Publish(ctx, &pubsubpb.PublishRequest{Topic: topic, Messages: msgs})
	return err
}

// pull pulls from sub until it has want messages or a pull comes back
// empty after the first, and returns their data and ack IDs.
func (c *checker) pull(ctx context.Context, sub string, want int) (data, ackIDs []string, err error) {
	for len(data) < want {
		pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		resp, err := c.client.SubscriptionAdminClient.Pull(pctx, &pubsubpb.PullRequest{Subscription: sub, MaxMessages: int32(want)})
		cancel()
		if err != nil || len(resp.ReceivedMessages) == 0 {
			if len(data) > 0 || ctx.Err() != nil {
				return data, ackIDs, nil
			}
			if err != nil && pctx.Err() == nil {
				return nil, nil, err
			}
			continue
		}
		for _, m := range resp.ReceivedMessages {
			data, ackIDs = append(data, string(m.Message.Data)), append(ackIDs, m.AckId)
		}
	}
	return data, ackIDs, nil
}

func (c *checker) ordered(ctx context.Context) (bool, string, error) {
	t, err := c.topic(ctx, nil)
	if err != nil {
		return false, "", err
	}
	s, err := c.sub(ctx, t, nil)
	if err != nil {
		return false, "", err
	}
	return s.EnableMessageOrdering, "", nil
}

func (c *checker) retention(ctx context.Context) (bool, string, error) {
	t, err := c.topic(ctx, func(t *pubsubpb.Topic) { t.MessageRetentionDuration = durationpb.New(time.Hour) })
	if err != nil {
		return false, "", err
	}
	got, err := c.client.TopicAdminClient.GetTopic(ctx, &pubsubpb.GetTopicRequest{Topic: t})
	if err != nil {
		return false, "", err
	}
	d := got.GetMessageRetentionDuration().AsDuration()
	return d == time.Hour, fmt.Sprintf("asked 1h, kept %v", d), nil
}

// filter publishes two messages, one of them matching a subscription's
// filter, and checks that only that one comes.
func (c *checker) filter(ctx context.Context) (bool, string, error) {
	t, err := c.topic(ctx, nil)
	if err != nil {
		return false, "", err
	}
	s, err := c.sub(ctx, t, func(s *pubsubpb.Subscription) { s.Filter = `attributes.probe = "in"` })
	if err != nil {
		return false, "", err
	}
	if err := c.publish(ctx, t, "k", "out", "in"); err != nil {
		return false, "", err
	}
	data, _, err := c.pull(ctx, s.Name, 2)
	if err != nil {
		return false, "", err
	}
	return len(data) == 1 && data[0] == "in", fmt.Sprintf("delivered %q", data), nil
}

// seekOrdered acks a message, seeks an ordered subscription back before
// it, and checks that it comes again.
func (c *checker) seekOrdered(ctx context.Context) (bool, string, error) {
	t, err := c.topic(ctx, func(t *pubsubpb.Topic) { t.MessageRetentionDuration = durationpb.New(time.Hour) })
	if err != nil {
		return false, "", err
	}
	s, err := c.sub(ctx, t, nil)
	if err != nil {
		return false, "", err
	}
	before := time.Now().Add(-time.Minute)
	if err := c.publish(ctx, t, "k", "m"); err != nil {
		return false, "", err
	}
	if _, acks, err := c.pull(ctx, s.Name, 1); err != nil || len(acks) == 0 {
		return false, "", fmt.Errorf("nothing pulled: %v", err)
	} else if err := c.client.SubscriptionAdminClient.Acknowledge(ctx, &pubsubpb.AcknowledgeRequest{Subscription: s.Name, AckIds: acks}); err != nil {
		return false, "", err
	}
	if _, err := c.client.SubscriptionAdminClient.Seek(ctx, &pubsubpb.SeekRequest{
		Subscription: s.Name, Target: &pubsubpb.SeekRequest_Time{Time: timestamppb.New(before)},
	}); err != nil {
		return false, "", err
	}
	data, _, err := c.pull(ctx, s.Name, 1)
	if err != nil {
		return false, "", err
	}
	return len(data) == 1, fmt.Sprintf("after the seek, delivered %q", data), nil
}

// tail pulls a key's three messages, nacks the first and acks the
// others: the service delivers all three again, in order.
func (c *checker) tail(ctx context.Context) (bool, string, error) {
	t, err := c.topic(ctx, nil)
	if err != nil {
		return false, "", err
	}
	s, err := c.sub(ctx, t, nil)
	if err != nil {
		return false, "", err
	}
	if err := c.publish(ctx, t, "k", "1", "2", "3"); err != nil {
		return false, "", err
	}
	data, acks, err := c.pull(ctx, s.Name, 3)
	if err != nil || len(acks) != 3 {
		return false, fmt.Sprintf("pulled %q", data), err
	}
	admin := c.client.SubscriptionAdminClient
	if err := admin.ModifyAckDeadline(ctx, &pubsubpb.ModifyAckDeadlineRequest{Subscription: s.Name, AckIds: acks[:1], AckDeadlineSeconds: 0}); err != nil {
		return false, "", err
	}
	if err := admin.Acknowledge(ctx, &pubsubpb.AcknowledgeRequest{Subscription: s.Name, AckIds: acks[1:]}); err != nil {
		return false, "", err
	}
	again, _, err := c.pull(ctx, s.Name, 3)
	if err != nil {
		return false, "", err
	}
	return strings.Join(again, " ") == "1 2 3", fmt.Sprintf("nacked 1 of 1 2 3; delivered again %q", again), nil
}

func (c *checker) deadLetter(ctx context.Context) (bool, string, error) {
	t, err := c.topic(ctx, nil)
	if err != nil {
		return false, "", err
	}
	dead, err := c.topic(ctx, nil)
	if err != nil {
		return false, "", err
	}
	s, err := c.sub(ctx, t, func(s *pubsubpb.Subscription) {
		s.DeadLetterPolicy = &pubsubpb.DeadLetterPolicy{DeadLetterTopic: dead, MaxDeliveryAttempts: 5}
	})
	if err != nil {
		return false, "", err
	}
	return s.GetDeadLetterPolicy().GetDeadLetterTopic() == dead, "", nil
}

func (c *checker) exactlyOnce(ctx context.Context) (bool, string, error) {
	t, err := c.topic(ctx, nil)
	if err != nil {
		return false, "", err
	}
	s, err := c.sub(ctx, t, func(s *pubsubpb.Subscription) { s.EnableExactlyOnceDelivery = true })
	if err != nil {
		return false, "", err
	}
	return s.EnableExactlyOnceDelivery, "", nil
}

func (c *checker) pushToken(ctx context.Context) (bool, string, error) {
	req, err := c.pushed(ctx)
	if err != nil {
		return false, "", err
	}
	return strings.HasPrefix(req.auth, "Bearer "), "", nil
}

func (c *checker) pushKey(ctx context.Context) (bool, string, error) {
	req, err := c.pushed(ctx)
	if err != nil {
		return false, "", err
	}
	return req.key == "k", fmt.Sprintf("orderingKey %q", req.key), nil
}

// pushedRequest is what a push probe saw of a request.
type pushedRequest struct {
	auth string // the Authorization header
	key  string // the message's orderingKey
}

// pushed makes an ordered push subscription, with an OIDC token, to an
// endpoint of its own, publishes one keyed message and returns what the
// first request carried.
func (c *checker) pushed(ctx context.Context) (pushedRequest, error) {
	got := make(chan pushedRequest, 1)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return pushedRequest{}, err
	}
	web := &http.Server{ReadHeaderTimeout: checkTimeout, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var env struct {
			Message struct {
				OrderingKey string `json:"orderingKey"`
			} `json:"message"`
		}
		_ = json.NewDecoder(r.Body).Decode(&env)
		select {
		case got <- pushedRequest{auth: r.Header.Get("Authorization"), key: env.Message.OrderingKey}:
		default:
		}
		w.WriteHeader(http.StatusNoContent)
	})}
	go func() { _ = web.Serve(lis) }()
	defer web.Close()
	t, err := c.topic(ctx, nil)
	if err != nil {
		return pushedRequest{}, err
	}
	if _, err := c.sub(ctx, t, func(s *pubsubpb.Subscription) {
		s.PushConfig = &pubsubpb.PushConfig{PushEndpoint: "http://" + lis.Addr().String() + "/push",
			AuthenticationMethod: &pubsubpb.PushConfig_OidcToken_{OidcToken: &pubsubpb.PushConfig_OidcToken{ServiceAccountEmail: "probe@" + c.client.Project() + ".iam.gserviceaccount.com"}}}
	}); err != nil {
		return pushedRequest{}, err
	}
	if err := c.publish(ctx, t, "k", "pushed"); err != nil {
		return pushedRequest{}, err
	}
	select {
	case req := <-got:
		return req, nil
	case <-ctx.Done():
		return pushedRequest{}, fmt.Errorf("no push within %v", checkTimeout)
	}
}

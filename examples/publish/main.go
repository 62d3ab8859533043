// Command publish shows where keyorder takes a message's ordering key from.
//
// It publishes messages whose key comes from each of the three sources of
// rule P1 (the call option, the partition-key header, the publisher's
// default), reads back what the server stored through an ordered
// subscription, and prints each message with its ordering key and
// attributes, and the number the publisher stamped it with in its key's
// sequence (S12), as epoch.number. It exits non-zero if a message's key or
// attributes are not what P1 and P2 promise.
//
// It uses an embedded pstest server, or the emulator PUBSUB_EMULATOR_HOST
// names:
//
//	go run ./examples/publish
package main

import (
	"context"
	"fmt"
	"maps"
	"os"
	"slices"
	"sort"
	"sync"
	"time"

	"cloud.google.com/go/pubsub/v2"
	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"

	"github.com/keyorder/keyorder/internal/harness"
	"github.com/keyorder/keyorder/ordering"
	"github.com/keyorder/keyorder/publisher"
)

// sent is one message of the demonstration, with what the server must hold.
type sent struct {
	source  string
	callKey string
	headers map[string]string
	wantKey string
}

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "publish:", err)
		os.Exit(1)
	}
}

func run() error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	client, where, closeAll, err := harness.Open(ctx)
	if err != nil {
		return err
	}
	defer closeAll()
	fmt.Println("server:", where)

	suffix := time.Now().Format("150405.000000")
	topic := "projects/" + client.Project() + "/topics/publish-demo-" + suffix
	sub := "projects/" + client.Project() + "/subscriptions/publish-demo-" + suffix
	if _, err := client.TopicAdminClient.CreateTopic(ctx, &pubsubpb.Topic{Name: topic}); err != nil {
		return err
	}
	if _, err := client.SubscriptionAdminClient.CreateSubscription(ctx, &pubsubpb.Subscription{
		Name: sub, Topic: topic, EnableMessageOrdering: true, AckDeadlineSeconds: 10,
	}); err != nil {
		return err
	}

	p, err := publisher.New(client, topic, publisher.WithDefaultOrderingKey("warehouse-1"))
	if err != nil {
		return err
	}
	messages := []sent{
		{"call option", "customer-7", map[string]string{ordering.Header: "ignored", "event": "created"}, "customer-7"},
		{"call option", "customer-7", map[string]string{"event": "paid"}, "customer-7"},
		{"header", "", map[string]string{ordering.Header: "customer-9", "event": "created"}, "customer-9"},
		{"header", "", map[string]string{ordering.Header: "customer-9", "event": "shipped"}, "customer-9"},
		{"default", "", map[string]string{"event": "restocked"}, "warehouse-1"},
	}
	for i, m := range messages {
		var opts []publisher.PublishOption
		if m.callKey != "" {
			opts = append(opts, publisher.WithOrderingKey(m.callKey))
		}
		msg := &publisher.Message{Data: []byte(fmt.Sprintf("message %d (key from %s)", i, m.source)), Headers: m.headers}
		if _, err := p.Publish(ctx, msg, opts...).Get(ctx); err != nil {
			return fmt.Errorf("publish %d: %w", i, err)
		}
	}
	if err := p.Close(ctx); err != nil {
		return err
	}

	got, err := receive(ctx, client, sub, len(messages))
	if err != nil {
		return err
	}
	fmt.Println("stored on the server:")
	failed := false
	for i, m := range messages {
		g, ok := got[fmt.Sprintf("message %d (key from %s)", i, m.source)]
		if !ok {
			return fmt.Errorf("message %d was not delivered", i)
		}
		want := maps.Clone(m.headers)
		delete(want, ordering.Header)
		// The publisher stamps every keyed message with its producer ID
		// and the message's number in the key's sequence (S12).
		stamp, err := ordering.ParseStamp(g.Attributes)
		attrs := maps.Clone(g.Attributes)
		ordering.DeleteStamp(attrs)
		verdict := "ok"
		if g.OrderingKey != m.wantKey || !maps.Equal(attrs, want) || err != nil || stamp.Producer != p.Producer() {
			verdict, failed = fmt.Sprintf("WRONG: want key %q, attributes %v, a stamp of producer %s", m.wantKey, want, p.Producer()), true
		}
		fmt.Printf("  %-30s ordering key %-12q attributes %-20v seq %s %s\n", g.Data, g.OrderingKey, sorted(attrs), ordering.FormatSeq(stamp.Seq), verdict)
	}
	if failed {
		return fmt.Errorf("a message's key or attributes broke P1 or P2")
	}
	fmt.Println("every key came from the right source, and no key became an attribute")
	return nil
}

// receive pulls n messages from sub and returns them by data.
func receive(ctx context.Context, client *pubsub.Client, sub string, n int) (map[string]*pubsub.Message, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var mu sync.Mutex
	got := map[string]*pubsub.Message{}
	err := client.Subscriber(sub).Receive(ctx, func(_ context.Context, m *pubsub.Message) {
		m.Ack()
		mu.Lock()
		defer mu.Unlock()
		got[string(m.Data)] = m
		if len(got) == n {
			cancel()
		}
	})
	if err != nil {
		return nil, err
	}
	if len(got) < n {
		return nil, fmt.Errorf("received %d of %d messages before the deadline", len(got), n)
	}
	return got, nil
}

// sorted renders attributes in key order, for stable output.
func sorted(attrs map[string]string) string {
	keys := slices.Collect(maps.Keys(attrs))
	sort.Strings(keys)
	s := "{"
	for i, k := range keys {
		if i > 0 {
			s += " "
		}
		s += k + "=" + attrs[k]
	}
	return s + "}"
}

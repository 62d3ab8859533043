package subscriber_test

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	"cloud.google.com/go/pubsub/v2"
	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/keyorder/keyorder/ordering/orderingtest"
	"github.com/keyorder/keyorder/subscriber"
)

// Replay reads what a topic retains, here on the in-process fake: two
// customers' orders, once each, in order per customer, with nothing to
// clean up afterwards.
func ExampleReplay() {
	ctx := context.Background()
	srv := orderingtest.NewServer()
	defer srv.Close()
	client, err := srv.Client(ctx, "my-project")
	if err != nil {
		panic(err)
	}
	defer client.Close()

	// Replay needs a topic that retains messages.
	_, err = client.TopicAdminClient.CreateTopic(ctx, &pubsubpb.Topic{
		Name:                     "projects/my-project/topics/orders",
		MessageRetentionDuration: durationpb.New(7 * 24 * time.Hour),
	})
	if err != nil {
		panic(err)
	}
	p := client.Publisher("orders")
	p.EnableMessageOrdering = true
	for _, o := range []string{"c-1:placed", "c-2:placed", "c-1:paid", "c-1:shipped", "c-2:paid"} {
		customer, _, _ := strings.Cut(o, ":")
		if _, err := p.Publish(ctx, &pubsub.Message{Data: []byte(o), OrderingKey: customer}).Get(ctx); err != nil {
			panic(err)
		}
	}
	p.Stop()

	var (
		mu     sync.Mutex
		events = map[string][]string{}
	)
	err = subscriber.Replay(ctx, client, "orders", time.Time{}, func(_ context.Context, d *subscriber.Delivery) error {
		mu.Lock()
		defer mu.Unlock()
		events[d.Key] = append(events[d.Key], string(d.Data))
		return nil
	}, subscriber.WithQuietPeriod(100*time.Millisecond))
	if err != nil {
		panic(err)
	}
	keys := make([]string, 0, len(events))
	for k := range events {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		fmt.Println(k, events[k])
	}
	fmt.Println("subscriptions left:", len(srv.Subscriptions()))
	// Output:
	// c-1 [c-1:placed c-1:paid c-1:shipped]
	// c-2 [c-2:placed c-2:paid]
	// subscriptions left: 0
}

package orderingtest_test

import (
	"context"
	"fmt"
	"log"
	"strconv"
	"strings"
	"sync"
	"time"

	"cloud.google.com/go/pubsub/v2"
	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"google.golang.org/grpc/codes"

	"github.com/keyorder/keyorder/ordering/orderingtest"
)

// setup creates topic "orders" and the ordered subscription
// "orders-billing" in project "my-project".
func setup(ctx context.Context, client *pubsub.Client) (topic, sub string) {
	topic = "projects/my-project/topics/orders"
	sub = "projects/my-project/subscriptions/orders-billing"
	if _, err := client.TopicAdminClient.CreateTopic(ctx, &pubsubpb.Topic{Name: topic}); err != nil {
		log.Fatal(err)
	}
	if _, err := client.SubscriptionAdminClient.CreateSubscription(ctx, &pubsubpb.Subscription{
		Name: sub, Topic: topic, EnableMessageOrdering: true,
	}); err != nil {
		log.Fatal(err)
	}
	return topic, sub
}

// publish publishes data on key, in order, and waits for every result.
func publish(ctx context.Context, client *pubsub.Client, topic, key string, data ...string) {
	p := client.Publisher(topic)
	defer p.Stop()
	p.EnableMessageOrdering = true
	var results []*pubsub.PublishResult
	for _, d := range data {
		results = append(results, p.Publish(ctx, &pubsub.Message{Data: []byte(d), OrderingKey: key}))
	}
	for _, r := range results {
		if _, err := r.Get(ctx); err != nil {
			log.Fatal(err)
		}
	}
}

// The server starts in two lines and a client connects in one more. Here a
// key's messages are published, received in order, and checked.
func Example() {
	srv := orderingtest.NewServer()
	defer srv.Close()
	ctx := context.Background()
	client, err := srv.Client(ctx, "my-project")
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()

	topic, sub := setup(ctx, client)
	publish(ctx, client, topic, "customer-1", "1", "2", "3")

	checker := orderingtest.NewChecker()
	checker.Expect("customer-1", 3)
	rctx, stop := context.WithTimeout(ctx, 10*time.Second)
	defer stop()
	go func() {
		// Wait for the server, not the clock: every message acked.
		_ = srv.WaitFor(rctx, func() bool { return srv.Stats(sub).Acked == 3 })
		stop()
	}()
	err = client.Subscriber(sub).Receive(rctx, func(_ context.Context, m *pubsub.Message) {
		seq, err := strconv.Atoi(string(m.Data))
		if err != nil {
			m.Nack()
			return
		}
		checker.Record(m.OrderingKey, seq)
		m.Ack()
	})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(checker.Report())
	// Output:
	// customer-1: 3 records, 3 expected: ok
	// total: 1 keys (0 violating order), 3 records: 0 out of order, 0 missing, 0 unexpected, 0 duplicates
}

// A nack redelivers the key's whole tail, in order, as the service does:
// the handler sees 3 before the redelivered 2, then 3 again. On pstest,
// which sends a key's next message only after an ack, it would see 1 2 2 3,
// and a handler that mishandles redelivered tails would pass.
func Example_tailRedelivery() {
	srv := orderingtest.NewServer()
	defer srv.Close()
	ctx := context.Background()
	client, err := srv.Client(ctx, "my-project")
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()
	topic, sub := setup(ctx, client)
	publish(ctx, client, topic, "k", "1", "2", "3")

	var mu sync.Mutex
	var handled []string
	nacked := false
	rctx, stop := context.WithTimeout(ctx, 10*time.Second)
	defer stop()
	go func() {
		// Five deliveries, all settled: the tail came back and was acked.
		_ = srv.WaitFor(rctx, func() bool {
			st := srv.Stats(sub)
			return st.Delivered == 5 && st.Outstanding == 0
		})
		stop()
	}()
	err = client.Subscriber(sub).Receive(rctx, func(_ context.Context, m *pubsub.Message) {
		mu.Lock()
		defer mu.Unlock()
		handled = append(handled, string(m.Data))
		if string(m.Data) == "2" && !nacked {
			nacked = true
			m.Nack()
			return
		}
		m.Ack()
	})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(strings.Join(handled, " "))
	// Output:
	// 1 2 3 2 3
}

// A publish whose response is lost: the server stores the message, then
// fails the call with Unavailable. The official client retries, and the
// message is stored twice, under two message IDs.
func ExampleServer_LosePublishResponses() {
	srv := orderingtest.NewServer()
	defer srv.Close()
	ctx := context.Background()
	client, err := srv.Client(ctx, "my-project")
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()
	topic, _ := setup(ctx, client)

	fault := srv.LosePublishResponses(orderingtest.Key("k"), codes.Unavailable, 1)
	publish(ctx, client, topic, "k", "hello")

	fmt.Println("fault fired:", fault.Hits())
	for _, m := range srv.Messages(topic) {
		fmt.Printf("message %s: %s\n", m.ID, m.Data)
	}
	// Output:
	// fault fired: 1
	// message 1: hello
	// message 2: hello
}

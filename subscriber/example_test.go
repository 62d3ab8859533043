package subscriber_test

import (
	"context"
	"fmt"
	"log"

	"github.com/keyorder/keyorder/ordering/orderingtest"
	"github.com/keyorder/keyorder/publisher"
	"github.com/keyorder/keyorder/subscriber"
)

// CreateWithTopic makes what is missing: the topic, then the subscription,
// with message ordering on. Called again, it finds them.
func ExampleCreateWithTopic() {
	ctx := context.Background()
	srv := orderingtest.NewServer()
	defer srv.Close()
	client, err := srv.Client(ctx, "my-project")
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()

	sub, err := subscriber.CreateWithTopic(ctx, client, "orders", "orders-billing")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(sub.Name())
	fmt.Println("topic:", sub.Topic())
	fmt.Println("ordered:", sub.Ordered())

	again, err := subscriber.CreateWithTopic(ctx, client, "orders", "orders-billing")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("found:", again.Name() == sub.Name())
	// Output:
	// projects/my-project/subscriptions/orders-billing
	// topic: projects/my-project/topics/orders
	// ordered: true
	// found: true
}

// Receive runs the handler for each message, a key's messages one at a
// time in publish order, and keys in parallel; it returns once its context
// ends and the running calls have finished.
func ExampleSubscription_Receive() {
	ctx := context.Background()
	srv := orderingtest.NewServer()
	defer srv.Close()
	client, err := srv.Client(ctx, "my-project")
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()
	sub, err := subscriber.CreateWithTopic(ctx, client, "orders", "orders-billing")
	if err != nil {
		log.Fatal(err)
	}

	p, err := publisher.New(client, "orders")
	if err != nil {
		log.Fatal(err)
	}
	var results []*publisher.Result
	for _, event := range []string{"created", "paid", "shipped"} {
		results = append(results, p.Publish(ctx, &publisher.Message{Data: []byte(event)}, publisher.WithOrderingKey("order-17")))
	}
	for _, r := range results {
		if _, err := r.Get(ctx); err != nil {
			log.Fatal(err)
		}
	}
	if err := p.Close(ctx); err != nil {
		log.Fatal(err)
	}

	rctx, stop := context.WithCancel(ctx)
	err = sub.Receive(rctx, func(_ context.Context, d *subscriber.Delivery) error {
		fmt.Printf("%s %s (attempt %d)\n", d.Key, d.Data, d.Attempt)
		if string(d.Data) == "shipped" {
			stop() // the example is done; a service would run until shutdown
		}
		return nil // acked: processed
	})
	if err != nil {
		log.Fatal(err)
	}
	// Output:
	// order-17 created (attempt 1)
	// order-17 paid (attempt 1)
	// order-17 shipped (attempt 1)
}

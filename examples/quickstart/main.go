// Command quickstart publishes orders and receives them in order per customer.
package main

import (
	"context"
	"fmt"
	"log"
	"sync/atomic"

	"cloud.google.com/go/pubsub/v2"

	"github.com/keyorder/keyorder/publisher"
	"github.com/keyorder/keyorder/subscriber"
)

func main() {
	if err := run(context.Background()); err != nil {
		log.Fatal(err)
	}
}

func run(ctx context.Context) error {
	client, err := pubsub.NewClient(ctx, "my-project") // PUBSUB_EMULATOR_HOST for a local server
	if err != nil {
		return err
	}
	defer client.Close()
	// Subscribe first: a subscription gets only what is published after it
	// exists. CreateWithTopic makes what is missing, with ordering on.
	sub, err := subscriber.CreateWithTopic(ctx, client, "orders", "orders-billing")
	if err != nil {
		return err
	}
	pub, err := publisher.New(client, "orders")
	if err != nil {
		return err
	}
	defer pub.Close(ctx)
	orders := [][2]string{{"c-7", "created"}, {"c-9", "created"}, {"c-7", "paid"}, {"c-9", "paid"}, {"c-7", "shipped"}}
	var results []*publisher.Result
	for _, o := range orders {
		results = append(results, pub.Publish(ctx, &publisher.Message{Data: []byte(o[1])}, publisher.WithOrderingKey(o[0])))
	}
	for _, r := range results {
		if _, err := r.Get(ctx); err != nil {
			return err // a *publisher.ValidationError, or a *publisher.PublishError naming the key
		}
	}
	// Receive: a customer's orders one at a time, in order; customers in parallel.
	ctx, stop := context.WithCancel(ctx)
	defer stop()
	var done atomic.Int64
	return sub.Receive(ctx, func(ctx context.Context, d *subscriber.Delivery) error {
		fmt.Printf("%s: %s\n", d.Key, d.Data)
		if done.Add(1) == int64(len(orders)) {
			stop() // Receive returns once running handlers finish
		}
		return nil // nil acks; an error retries, then holds the key
	})
}

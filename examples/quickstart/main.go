// Command quickstart creates an ordered subscription, publishes the orders
// of two customers, and processes them in order per customer.
//
// Against the emulator or keyorder's fake, set PUBSUB_EMULATOR_HOST; on
// Google Cloud, set GOOGLE_CLOUD_PROJECT and credentials.
package main

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"os/signal"
	"sync/atomic"

	"cloud.google.com/go/pubsub/v2"

	"github.com/keyorder/keyorder/publisher"
	"github.com/keyorder/keyorder/subscriber"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx); err != nil {
		log.Fatal(err)
	}
}

func run(ctx context.Context) error {
	project := os.Getenv("GOOGLE_CLOUD_PROJECT")
	if project == "" {
		project = "keyorder-test" // the examples' project on an emulator
	}
	client, err := pubsub.NewClient(ctx, project) // honours PUBSUB_EMULATOR_HOST
	if err != nil {
		return err
	}
	defer client.Close()

	// Subscribe first: a subscription gets only what is published after
	// it exists. CreateWithTopic creates the topic too, with ordering on.
	sub, err := subscriber.CreateWithTopic(ctx, client, "orders", "orders-billing",
		subscriber.WithWorkers(16))
	if err != nil {
		return err
	}

	// Publish: the key comes from the call, the partition-key header, or
	// the publisher's default.
	p, err := publisher.New(client, "orders")
	if err != nil {
		return err
	}
	orders := []struct{ customer, event string }{
		{"c-7", "created"}, {"c-9", "created"}, {"c-7", "paid"},
		{"c-9", "paid"}, {"c-7", "shipped"},
	}
	var results []*publisher.Result
	for _, o := range orders {
		results = append(results, p.Publish(ctx, &publisher.Message{
			Data:    []byte(o.event),
			Headers: map[string]string{"partition-key": o.customer, "source": "checkout"},
		}))
	}
	for _, r := range results {
		if _, err := r.Get(ctx); err != nil {
			var pe *publisher.PublishError // names the key; the key resumes by itself
			if errors.As(err, &pe) {
				return fmt.Errorf("customer %s: %w", pe.Key, err)
			}
			return err // a *publisher.ValidationError: rejected before sending
		}
	}
	if err := p.Close(ctx); err != nil {
		return err
	}

	// Receive until every order is processed. A customer's orders arrive
	// one at a time, in publish order; customers run in parallel.
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var left atomic.Int64
	left.Store(int64(len(orders)))
	return sub.Receive(rctx, func(ctx context.Context, d *subscriber.Delivery) error {
		fmt.Printf("%s: %s\n", d.Key, d.Data) // d.Key == d.Headers["partition-key"]
		if left.Add(-1) == 0 {
			cancel() // Receive returns once running handlers finish
		}
		return nil // nil acks; an error retries, then holds the key (S5)
	})
}

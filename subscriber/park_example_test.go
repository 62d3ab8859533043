package subscriber_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"sync/atomic"
	"time"

	"github.com/keyorder/keyorder/ordering/orderingtest"
	"github.com/keyorder/keyorder/publisher"
	"github.com/keyorder/keyorder/subscriber"
)

// A poison message parks its key; after the fix, Release runs the key's
// parked messages, in order.
func ExampleSubscription_Release() {
	ctx := context.Background()
	srv := orderingtest.NewServer()
	defer srv.Close()
	client, err := srv.Client(ctx, "demo")
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()

	sub, err := subscriber.CreateWithTopic(ctx, client, "ledger", "ledger-balances",
		subscriber.WithParking("ledger-parked"))
	if err != nil {
		log.Fatal(err)
	}
	p, err := publisher.New(client, "ledger")
	if err != nil {
		log.Fatal(err)
	}
	for _, event := range []string{"deposit 10", "deposit ten", "withdraw 5"} {
		if _, err := p.Publish(ctx, &publisher.Message{Data: []byte(event)}, publisher.WithOrderingKey("acct-1")).Get(ctx); err != nil {
			log.Fatal(err)
		}
	}
	if err := p.Close(ctx); err != nil {
		log.Fatal(err)
	}

	var fixed atomic.Bool
	rctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		done <- sub.Receive(rctx, func(_ context.Context, d *subscriber.Delivery) error {
			if string(d.Data) == "deposit ten" && !fixed.Load() {
				return subscriber.Permanent(errors.New("amount is not a number"))
			}
			fmt.Println("applied", string(d.Data))
			return nil
		})
	}()

	for {
		parked, err := sub.Parked(ctx)
		if err != nil {
			log.Fatal(err)
		}
		if len(parked) == 1 && parked[0].Messages == 2 {
			fmt.Printf("parked %s: %d messages, %s\n", parked[0].Key, parked[0].Messages, parked[0].LastError)
			break
		}
		time.Sleep(10 * time.Millisecond)
	}

	fixed.Store(true) // the fix is deployed
	if err := sub.Release(ctx, "acct-1"); err != nil {
		log.Fatal(err)
	}
	stop()
	if err := <-done; err != nil {
		log.Fatal(err)
	}
	// Output:
	// applied deposit 10
	// parked acct-1: 2 messages, permanent: amount is not a number
	// applied deposit ten
	// applied withdraw 5
}

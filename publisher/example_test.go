package publisher_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"slices"
	"strings"

	"cloud.google.com/go/pubsub/v2"
	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"google.golang.org/api/option"
	"google.golang.org/grpc/status"

	"github.com/keyorder/keyorder/ordering"
	"github.com/keyorder/keyorder/ordering/orderingtest"
	"github.com/keyorder/keyorder/publisher"
)

// fake starts an in-process server with the topic "orders" of project
// "my-project", and returns a client of it, and a function that closes
// both.
func fake(ctx context.Context) (*orderingtest.Server, *pubsub.Client, func()) {
	srv := orderingtest.NewServer()
	client, err := srv.Client(ctx, "my-project")
	if err != nil {
		log.Fatal(err)
	}
	if _, err := client.TopicAdminClient.CreateTopic(ctx, &pubsubpb.Topic{Name: "projects/my-project/topics/orders"}); err != nil {
		log.Fatal(err)
	}
	return srv, client, func() { client.Close(); srv.Close() }
}

// New takes a client of the official package, and the topic's ID or full
// name; it does no I/O. Options are checked here, once.
func ExampleNew() {
	ctx := context.Background()
	_, client, done := fake(ctx)
	defer done()

	p, err := publisher.New(client, "orders",
		publisher.WithDefaultOrderingKey("warehouse-1"),
		publisher.WithProducerID("orders-api"))
	if err != nil {
		log.Fatal(err)
	}
	defer p.Close(ctx)
	_, err = p.Publish(ctx, &publisher.Message{Data: []byte("restocked")}).Get(ctx)
	fmt.Println("published:", err == nil)

	// A topic ID the service would refuse is refused here.
	_, err = publisher.New(client, "goog-orders")
	fmt.Println(errors.Is(err, publisher.ErrInvalidConfig))
	fmt.Println(err)
	// Output:
	// published: true
	// true
	// keyorder/publisher: invalid configuration: topic "goog-orders": the ID starts with "goog", which the service reserves
}

// Publish returns at once with a Result; the messages of a key reach the
// topic in the order of their Publish calls, each with a stamp of its
// producer and its number in the key's sequence. Keys are not ordered
// with each other: the topic's messages are listed here by key.
func ExamplePublisher_Publish() {
	ctx := context.Background()
	srv, client, done := fake(ctx)
	defer done()
	p, err := publisher.New(client, "orders")
	if err != nil {
		log.Fatal(err)
	}

	var results []*publisher.Result
	for _, o := range []struct{ customer, event string }{
		{"customer-7", "created"}, {"customer-9", "created"}, {"customer-7", "paid"},
	} {
		results = append(results, p.Publish(ctx, &publisher.Message{
			Data:    []byte(o.event),
			Headers: map[string]string{ordering.Header: o.customer, "source": "checkout"},
		}))
	}
	for _, r := range results {
		if _, err := r.Get(ctx); err != nil {
			log.Fatal(err)
		}
	}
	if err := p.Close(ctx); err != nil {
		log.Fatal(err)
	}

	stored := srv.Messages("projects/my-project/topics/orders")
	slices.SortStableFunc(stored, func(a, b orderingtest.Message) int { return strings.Compare(a.OrderingKey, b.OrderingKey) })
	for _, m := range stored {
		stamp, _ := ordering.ParseStamp(m.Attributes)
		fmt.Printf("%s %s source=%s seq=%s\n", m.OrderingKey, m.Data, m.Attributes["source"], ordering.FormatSeq(stamp.Seq))
	}
	// Output:
	// customer-7 created source=checkout seq=1.1
	// customer-7 paid source=checkout seq=1.2
	// customer-9 created source=checkout seq=2.1
}

// A failure fails its key's tail with it (P4). Here the topic is missing
// when the messages are published. NotFound is not [publisher.Retryable]:
// retried as it is, the request would meet the same refusal. Once the
// topic exists, Retry sends the failed messages again, in the order of
// their first Publish calls.
func ExamplePublisher_Retry() {
	ctx := context.Background()
	srv := orderingtest.NewServer()
	defer srv.Close()
	client, err := srv.Client(ctx, "my-project")
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()
	p, err := publisher.New(client, "late-topic")
	if err != nil {
		log.Fatal(err)
	}
	defer p.Close(ctx)

	events := []string{"created", "paid", "shipped"}
	var results, failed []*publisher.Result
	for _, event := range events {
		results = append(results, p.Publish(ctx, &publisher.Message{Data: []byte(event)}, publisher.WithOrderingKey("customer-7")))
	}
	for i, r := range results {
		var pe *publisher.PublishError
		if _, err := r.Get(ctx); errors.As(err, &pe) {
			fmt.Printf("%s: %v\n", events[i], status.Code(err))
			failed = append(failed, r)
		}
	}

	if _, err := client.TopicAdminClient.CreateTopic(ctx, &pubsubpb.Topic{Name: "projects/my-project/topics/late-topic"}); err != nil {
		log.Fatal(err)
	}
	retried, err := p.Retry(ctx, failed...)
	if err != nil {
		log.Fatal(err)
	}
	for _, r := range retried {
		if _, err := r.Get(ctx); err != nil {
			log.Fatal(err)
		}
	}
	for _, m := range srv.Messages("projects/my-project/topics/late-topic") {
		fmt.Println(m.OrderingKey, string(m.Data))
	}
	// Output:
	// created: NotFound
	// paid: NotFound
	// shipped: NotFound
	// customer-7 created
	// customer-7 paid
	// customer-7 shipped
}

// The service keeps a key's order only among messages published in one
// region (see the package documentation, Regions). Publishers of a key in
// several places pin their clients to one region's locational endpoint.
func ExampleNew_locationalEndpoint() {
	ctx := context.Background()
	client, err := pubsub.NewClient(ctx, "my-project",
		option.WithEndpoint("europe-west1-pubsub.googleapis.com:443"))
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()

	p, err := publisher.New(client, "orders")
	if err != nil {
		log.Fatal(err)
	}
	defer p.Close(ctx)
	if _, err := p.Publish(ctx, &publisher.Message{Data: []byte("created")}, publisher.WithOrderingKey("customer-7")).Get(ctx); err != nil {
		log.Fatal(err)
	}
}

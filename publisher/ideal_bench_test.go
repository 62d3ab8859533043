package publisher_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"cloud.google.com/go/pubsub/v2"
	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"

	"github.com/keyorder/keyorder/publisher"
)

// idealSide is the floor a batcher under keyorder's bound on requests in
// flight can reach: each round of n messages, message i with key
// names[i%len(names)] and the header, goes straight to
// TopicAdminClient.Publish as one request per key (of at most 1,000
// messages; a key's requests one after another, P3), at most
// publisher.DefaultInFlight() at once, with nothing
// stamped, no linger, no Result and no retry. What it takes is the
// round trips the bound allows, and what gRPC and the server spend on the
// requests; keyorder's time over its time is what keyorder adds.
func idealSide(b *testing.B, client *pubsub.Client, topic string, n int, names []string) side {
	full := fmt.Sprintf("projects/%s/topics/%s", client.Project(), topic)
	data := make([]byte, 128)
	headers := map[string]string{"kind": "order-created"}
	perKey := (n + len(names) - 1) / len(names)
	return side{name: "ideal", round: func() time.Duration {
		start := time.Now()
		keys := make(chan []*pubsubpb.PublishRequest, len(names))
		for k, name := range names {
			var reqs []*pubsubpb.PublishRequest
			for lo := 0; lo < perKey; lo += pubsub.MaxPublishRequestCount {
				msgs := make([]*pubsubpb.PubsubMessage, 0, min(perKey-lo, pubsub.MaxPublishRequestCount))
				for i := lo; i < perKey && i < lo+pubsub.MaxPublishRequestCount && k+i*len(names) < n; i++ {
					msgs = append(msgs, &pubsubpb.PubsubMessage{Data: data, Attributes: headers, OrderingKey: name})
				}
				reqs = append(reqs, &pubsubpb.PublishRequest{Topic: full, Messages: msgs})
			}
			keys <- reqs
		}
		close(keys)
		publishing := time.Since(start)
		var wg sync.WaitGroup
		for range min(publisher.DefaultInFlight(), len(names)) {
			wg.Go(func() {
				for reqs := range keys {
					for _, req := range reqs {
						if _, err := client.TopicAdminClient.Publish(context.Background(), req); err != nil {
							b.Error(err)
						}
					}
				}
			})
		}
		wg.Wait()
		return publishing
	}}
}

package orderingtest_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"time"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"google.golang.org/api/idtoken"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/keyorder/keyorder/ordering/orderingtest"
)

// A push endpoint under test receives a key's messages one at a time, each
// with a token that it verifies with the validator the server hands it, as
// it would verify Google's with idtoken.NewValidator. A failure is pushed
// again after the retry policy's backoff, before the key's next message.
func Example_push() {
	srv := orderingtest.NewServer()
	defer srv.Close()
	ctx := context.Background()
	client, err := srv.Client(ctx, "my-project")
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()
	validator, err := srv.TokenValidator(ctx)
	if err != nil {
		log.Fatal(err)
	}

	var failed atomic.Bool
	endpoint := httptest.NewServer(pushHandler(validator, "pusher@my-project.iam.gserviceaccount.com", func(data string) bool {
		fmt.Println("pushed", data)
		// Fail 2 once: it is answered 500, and pushed again.
		return data != "2" || !failed.CompareAndSwap(false, true)
	}))
	defer endpoint.Close()

	topic := "projects/my-project/topics/orders"
	sub := "projects/my-project/subscriptions/orders-push"
	if _, err := client.TopicAdminClient.CreateTopic(ctx, &pubsubpb.Topic{Name: topic}); err != nil {
		log.Fatal(err)
	}
	if _, err := client.SubscriptionAdminClient.CreateSubscription(ctx, &pubsubpb.Subscription{
		Name: sub, Topic: topic, EnableMessageOrdering: true,
		PushConfig: &pubsubpb.PushConfig{
			PushEndpoint: endpoint.URL + "/push", // the token's audience, since none is named
			AuthenticationMethod: &pubsubpb.PushConfig_OidcToken_{OidcToken: &pubsubpb.PushConfig_OidcToken{
				ServiceAccountEmail: "pusher@my-project.iam.gserviceaccount.com",
			}},
		},
		RetryPolicy: &pubsubpb.RetryPolicy{MinimumBackoff: durationpb.New(10 * time.Millisecond), MaximumBackoff: durationpb.New(time.Second)},
	}); err != nil {
		log.Fatal(err)
	}
	publish(ctx, client, topic, "customer-1", "1", "2", "3")

	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := srv.WaitFor(wctx, func() bool { return srv.Stats(sub).Acked == 3 }); err != nil {
		log.Fatal(err)
	}
	fmt.Println("nacked:", srv.Stats(sub).Nacked)
	// Output:
	// pushed 1
	// pushed 2
	// pushed 2
	// pushed 3
	// nacked: 1
}

// pushHandler is a push endpoint: it refuses a request without a valid
// token from email, for its own URL, and answers 204 if handle succeeds.
func pushHandler(v *idtoken.Validator, email string, handle func(data string) bool) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		token, _ := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		payload, err := v.Validate(r.Context(), token, "http://"+r.Host+r.URL.Path)
		if err != nil || payload.Issuer != "https://accounts.google.com" ||
			payload.Claims["email"] != email || payload.Claims["email_verified"] != true {
			http.Error(w, "who are you?", http.StatusUnauthorized)
			return
		}
		var envelope struct {
			Message struct {
				Data []byte `json:"data"`
			} `json:"message"`
		}
		if err := json.NewDecoder(r.Body).Decode(&envelope); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		if !handle(string(envelope.Message.Data)) {
			http.Error(w, "failed", http.StatusInternalServerError)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	})
}

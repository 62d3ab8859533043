package statuspage_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"

	"github.com/keyorder/keyorder/ordering/orderingtest"
	"github.com/keyorder/keyorder/subscriber"
	"github.com/keyorder/keyorder/subscriber/statuspage"
)

// The page is mounted beside the service's other debug pages; its JSON,
// ?format=json, is what the HTML page polls, and what an alert can read.
func ExampleHandler() {
	srv := orderingtest.NewServer()
	defer srv.Close()
	ctx := context.Background()
	client, err := srv.Client(ctx, "my-project")
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()
	sub, err := subscriber.CreateWithTopic(ctx, client, "orders", "orders-billing")
	if err != nil {
		log.Fatal(err)
	}

	mux := http.NewServeMux()
	mux.Handle("/debug/keyorder/", http.StripPrefix("/debug/keyorder", statuspage.Handler(sub)))
	web := httptest.NewServer(mux)
	defer web.Close()

	res, err := http.Get(web.URL + "/debug/keyorder/?format=json")
	if err != nil {
		log.Fatal(err)
	}
	defer res.Body.Close()
	var st statuspage.Status
	if err := json.NewDecoder(res.Body).Decode(&st); err != nil {
		log.Fatal(err)
	}
	fmt.Println(res.Status)
	fmt.Println(st.Subscription)
	fmt.Println("receiving:", st.Receiving, "held keys:", len(st.Held))
	// Output:
	// 200 OK
	// projects/my-project/subscriptions/orders-billing
	// receiving: false held keys: 0
}

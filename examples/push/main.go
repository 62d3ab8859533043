// Command push is a small HTTP service that receives orders by push, in
// order per customer.
//
// With push, Pub/Sub POSTs each message to an endpoint of yours, and the
// status of your answer is the ack. It suits services that already serve
// HTTP and scale with requests (Cloud Run, App Engine, GKE behind a load
// balancer): no stream to keep open. On an ordered push subscription the
// service keeps one message per ordering key outstanding, so a customer's
// next event is pushed only once the endpoint has acknowledged the one
// before.
//
// The program starts keyorder's ordering-faithful fake in process (pstest
// does not push), serves sub.PushHandler on a local HTTP server, creates
// an ordered push subscription whose requests carry OIDC tokens of a
// service account, and publishes a few customers' order events. The
// handler applies them per customer, checking that each is the customer's
// next one. Each answer is the ack: 204 when the handler succeeded, 500
// when it failed. One event fails once, transiently: it is answered 500,
// and the service pushes it again after the subscription's retry policy's
// backoff, before the customer's next event. Then the program sends its
// own endpoint three forged requests: one without a token, one with a
// token signed by a key Google never used, and one without a token that
// sends 10 bytes of its body and stalls; all are refused with 401, the
// last at once, without waiting for its body, and the handler does not
// run. The HTTP server has the timeouts a public endpoint needs. It exits non-zero if an event was applied out
// of order, twice or not at all, or if a forged request got in.
//
// On Google Cloud the endpoint is an HTTPS URL the service can reach, the
// service account must exist, and WithTokenValidator is left out: the
// handler checks Google's own signatures, with idtoken's default
// validator. The same Handler runs on pull, with sub.Receive(ctx, handler)
// on a subscription made without WithPush.
//
//	go run ./examples/push
package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"time"

	"cloud.google.com/go/pubsub/v2"

	"github.com/keyorder/keyorder/internal/harness"
	"github.com/keyorder/keyorder/ordering/orderingtest"
	"github.com/keyorder/keyorder/publisher"
	"github.com/keyorder/keyorder/subscriber"
)

func main() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := run(ctx, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "push:", err)
		os.Exit(1)
	}
}

// pusher is the service account the
// service signs each push request as.
const pusher = "orders-pusher@my-project.iam.gserviceaccount.com"

// lifecycle lists an order's events in the only order they can happen.
var lifecycle = []string{"created", "paid", "shipped", "delivered"}

// orders says how far each customer's order goes: its first n events of
// lifecycle are published, in order.
var orders = map[string]int{"c-1": 4, "c-2": 4, "c-3": 2}

// The flaky event fails once, transiently: its customer's later events
// wait until it succeeds.
const flakyCustomer, flakyEvent = "c-2", "paid"

// run starts the fake, runs the service on it, and closes the fake.
func run(ctx context.Context, out io.Writer) error {
	if err := harness.EmbeddedOnly("examples/push", "signs push tokens, forges bad ones and counts acks"); err != nil {
		return err
	}
	fake, err := orderingtest.New()
	if err != nil {
		return err
	}
	client, err := fake.Client(ctx, harness.ExampleProject())
	if err == nil {
		err = serve(ctx, out, fake, client)
		_ = client.Close()
	}
	_ = fake.Close()
	fmt.Fprintln(out, "closed the fake")
	if err != nil {
		return err
	}
	fmt.Fprintln(out, "every event was applied once, in order per customer, and the forged requests were refused")
	return nil
}

// serve runs the push endpoint on fake, publishes the orders, waits until
// every one is acknowledged, sends the forged requests and shuts down.
func serve(ctx context.Context, out io.Writer, fake *orderingtest.Server, client *pubsub.Client) error {
	validator, err := fake.TokenValidator(ctx) // trusts the fake's signing key
	if err != nil {
		return err
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	endpoint := "http://" + lis.Addr().String() + "/push"
	sub, err := subscriber.CreateWithTopic(ctx, client, "orders", "orders-push",
		subscriber.WithPush(endpoint),
		subscriber.WithPushAuth(pusher, ""), // "": the audience is the endpoint's URL
		subscriber.WithTokenValidator(validator),
		subscriber.WithRetryPolicy(10*time.Millisecond, 100*time.Millisecond))
	if err != nil {
		_ = lis.Close()
		return err
	}
	b := newBook()
	mux := http.NewServeMux()
	mux.Handle("/push", sub.PushHandler(b.apply))
	web := pushServer(mux)
	served := make(chan error, 1)
	go func() { served <- web.Serve(lis) }()
	fmt.Fprintf(out, "serving %s: requests must carry a token of %s for that URL\n", endpoint, pusher)

	err = demo(ctx, out, fake, client, sub, b)

	// Stop taking requests first (the service pushes again what it had in
	// flight), then stop the handler calls; run closes the fake last.
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	err = errors.Join(err, web.Shutdown(sctx))
	if serr := <-served; !errors.Is(serr, http.ErrServerClosed) {
		err = errors.Join(err, serr)
	}
	fmt.Fprintln(out, "closed the HTTP server")
	err = errors.Join(err, sub.Close(sctx))
	fmt.Fprintln(out, "closed the subscription")
	return errors.Join(err, b.check())
}

// pushServer returns the HTTP server of a push endpoint, with the timeouts
// it needs (PushHandler's doc): a public URL meets clients that send
// slowly, or not at all.
func pushServer(h http.Handler) *http.Server {
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 10 * time.Second,
		// A body is at most 14 MB (10 MB of data in base64).
		ReadTimeout: time.Minute,
		// The answer waits for the handler, which the subscription's
		// ack deadline bounds: 10 s by default.
		WriteTimeout: 30 * time.Second,
		IdleTimeout:  2 * time.Minute,
	}
}

// demo publishes the orders, waits for the fake to see every one
// acknowledged, prints what was applied, and sends the forged requests.
func demo(ctx context.Context, out io.Writer, fake *orderingtest.Server, client *pubsub.Client, sub *subscriber.Subscription, b *book) error {
	p, err := publisher.New(client, "orders")
	if err != nil {
		return err
	}
	var results []*publisher.Result
	for i := range lifecycle { // interleave the customers
		for _, c := range customers() {
			if i < orders[c] {
				results = append(results, p.Publish(ctx, &publisher.Message{Data: []byte(lifecycle[i])}, publisher.WithOrderingKey(c)))
			}
		}
	}
	for _, r := range results {
		if _, err := r.Get(ctx); err != nil {
			return err
		}
	}
	if err := p.Close(ctx); err != nil {
		return err
	}
	fmt.Fprintf(out, "published %d events for %d customers\n", len(results), len(orders))

	err = fake.WaitFor(ctx, func() bool { return fake.Stats(sub.Name()).Acked == len(results) })
	b.print(out)
	if err != nil {
		return fmt.Errorf("not every event was acknowledged: %w", err)
	}
	st := fake.Stats(sub.Name())
	fmt.Fprintf(out, "the fake pushed %d times: %d answered 204 (ack), %d answered 500 (nack, pushed again)\n",
		st.Delivered, st.Acked, st.Nacked)

	forged, err := fake.ForgeToken(fake.PushClaims(pusher, sub.PushEndpoint()))
	if err != nil {
		return err
	}
	for _, f := range []struct{ what, token string }{{"without a token", ""}, {"with a token signed by another key", forged}} {
		calls := b.callCount()
		status, err := forge(ctx, sub, f.token)
		if err != nil {
			return err
		}
		ran := b.callCount() != calls
		fmt.Fprintf(out, "forged request %s: %d %s, handler ran: %t\n", f.what, status, http.StatusText(status), ran)
		if status != http.StatusUnauthorized || ran {
			return fmt.Errorf("a forged request %s was not refused", f.what)
		}
	}
	status, err := stall(sub)
	if err != nil {
		return fmt.Errorf("a forged request that stalls its body: %w", err)
	}
	fmt.Fprintf(out, "forged request that sends 10 bytes of 1000, then nothing: %d %s at once\n", status, http.StatusText(status))
	return nil
}

// stall sends sub's endpoint a request without a token that sends 10
// bytes of its 1000-byte body, then nothing, and returns the status that
// came back, within a second, or an error.
func stall(sub *subscriber.Subscription) (int, error) {
	u, err := url.Parse(sub.PushEndpoint())
	if err != nil {
		return 0, err
	}
	conn, err := net.DialTimeout("tcp", u.Host, time.Second)
	if err != nil {
		return 0, err
	}
	defer conn.Close()
	if _, err := fmt.Fprintf(conn, "POST %s HTTP/1.1\r\nHost: %s\r\nContent-Length: 1000\r\n\r\n0123456789", u.Path, u.Host); err != nil {
		return 0, err
	}
	if err := conn.SetReadDeadline(time.Now().Add(time.Second)); err != nil {
		return 0, err
	}
	res, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		return 0, fmt.Errorf("no answer within a second: %w", err)
	}
	_ = res.Body.Close()
	if res.StatusCode != http.StatusUnauthorized {
		return 0, fmt.Errorf("answered %d, not 401", res.StatusCode)
	}
	return res.StatusCode, nil
}

// forge POSTs to sub's endpoint a well-formed push request that refunds
// c-1's order, with token ("" for none), and returns the status.
func forge(ctx context.Context, sub *subscriber.Subscription, token string) (int, error) {
	body, err := json.Marshal(map[string]any{
		"message":      map[string]any{"data": []byte("refunded"), "messageId": "forged-1", "orderingKey": "c-1"},
		"subscription": sub.Name(),
	})
	if err != nil {
		return 0, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, sub.PushEndpoint(), bytes.NewReader(body))
	if err != nil {
		return 0, err
	}
	req.Close = true // leave no idle connection behind
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	_ = res.Body.Close()
	return res.StatusCode, nil
}

package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"

	"cloud.google.com/go/pubsub/v2"

	"github.com/keyorder/keyorder/ordering"
	"github.com/keyorder/keyorder/publisher"
)

// An order is one message: the Seq-th event of a customer's order,
// counting from 1 in publish order, so a subscriber can tell whether it
// saw a customer's events in that order.
type order struct {
	Customer string `json:"customer"`
	Seq      int    `json:"seq"`
	Event    string `json:"event"`
}

// stages name an order's events; events past the last are updates.
var stages = []string{"created", "paid", "packed", "shipped", "delivered", "closed"}

func stage(seq int) string {
	if seq <= len(stages) {
		return stages[seq-1]
	}
	return "updated"
}

// customer names the i-th customer, from 0. The names are padded so that
// reports, which sort keys as strings, list them in number order.
func customer(i int) string { return fmt.Sprintf("c-%02d", i+1) }

// The three places rule P1 takes a key from. Customer 0 uses the
// publisher's default; the others alternate between the call option and
// the partition-key header.
const (
	fromCall    = "WithOrderingKey"
	fromHeader  = "partition-key header"
	fromDefault = "publisher default"
)

func keySource(i int) string {
	switch {
	case i == 0:
		return fromDefault
	case i%2 == 1:
		return fromCall
	default:
		return fromHeader
	}
}

// message builds customer i's seq-th order event, its key set the way
// keySource(i) says; the data always names the customer, so a subscriber
// can check that the key came out right.
func message(i, seq int) (*publisher.Message, []publisher.PublishOption) {
	o := order{Customer: customer(i), Seq: seq, Event: stage(seq)}
	data, _ := json.Marshal(o) // cannot fail: strings and ints
	msg := &publisher.Message{Data: data, Headers: map[string]string{"event": o.Event}}
	switch keySource(i) {
	case fromCall:
		return msg, []publisher.PublishOption{publisher.WithOrderingKey(o.Customer)}
	case fromHeader:
		msg.Headers[ordering.Header] = o.Customer
	}
	return msg, nil // fromDefault: no key on the message or the call
}

// publish sends every customer's events to topic and waits until the
// server has taken them all. Customers are interleaved, event by event, as
// a service would publish them; P3 keeps each customer's events in the
// order of their Publish calls, so nothing here waits between them.
func publish(ctx context.Context, client *pubsub.Client, topic string, cfg config, out io.Writer) (err error) {
	p, err := publisher.New(client, topic, publisher.WithDefaultOrderingKey(customer(0)))
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, p.Close(ctx)) }()
	var results []*publisher.Result
	for seq := 1; seq <= cfg.events; seq++ {
		for i := range cfg.customers {
			msg, opts := message(i, seq)
			results = append(results, p.Publish(ctx, msg, opts...))
		}
	}
	for _, r := range results {
		if _, err := r.Get(ctx); err != nil {
			return fmt.Errorf("publish: %w", err)
		}
	}
	fmt.Fprintf(out, "published %d orders: %d customers × %d events, keyed by customer\n",
		len(results), cfg.customers, cfg.events)
	bySource := map[string][]string{}
	for i := range cfg.customers {
		bySource[keySource(i)] = append(bySource[keySource(i)], customer(i))
	}
	for _, src := range []string{fromCall, fromHeader, fromDefault} {
		if len(bySource[src]) > 0 {
			fmt.Fprintf(out, "  key from %-21s %s\n", src+":", strings.Join(bySource[src], " "))
		}
	}
	return nil
}

package main

import (
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"cloud.google.com/go/pubsub/v2"

	"github.com/keyorder/keyorder/internal/harness"
	"github.com/keyorder/keyorder/ordering"
	"github.com/keyorder/keyorder/ordering/orderingtest"
)

// Signed stamps. With a stamp key, the relays sign every stamp they write
// (outbox.WithStampKey) and the replicas verify each one
// (subscriber.WithStampKey). Anyone who may publish to the topic can
// still write a stamp with the outbox's producer ID and a number far
// ahead: taken on trust, it would make the outbox's next real events of
// its account look like copies, acked unapplied. With -forge, the story
// publishes two such messages midway, one unsigned and one signed with
// another key; the replicas must drop them and change nothing.

// stampKeyEnv carries the stamp key, in hex, to the relays and the
// replicas: like a DSN's password, it is no business of a command line.
const stampKeyEnv = "KEYORDER_OUTBOX_STAMP_KEY"

// forgedNumber is the number of the forged stamps, within the epoch of the
// outbox's real ones: far beyond any event of the story.
const forgedNumber = 1 << 30

// parseStampKey reads a stamp key in hex; "" is no key.
func parseStampKey(text string) ([]byte, error) {
	if text == "" {
		return nil, nil
	}
	key, err := hex.DecodeString(text)
	if err != nil {
		return nil, fmt.Errorf("stamp key: %w", err)
	}
	if _, err := ordering.NewStampKeys(key); err != nil {
		return nil, err
	}
	return key, nil
}

// forge waits until a third of the story's events are stored, then
// publishes two messages on the account of the last one, stamped with its
// producer ID and forgedNumber: one unsigned, one signed with a key
// nobody verifies with. Their events, if applied, would show as versions
// no writer made, with amounts no writer added.
func forge(ctx context.Context, cfg config, srv *orderingtest.Server, topic string) error {
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	var real orderingtest.Message
	for {
		if msgs := srv.Messages(topic); len(msgs) >= cfg.total()/3 {
			real = msgs[len(msgs)-1]
			break
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("forge: %w", ctx.Err())
		case <-tick.C:
		}
	}
	st, err := ordering.ParseStamp(real.Attributes)
	if err != nil || st.IsZero() {
		return fmt.Errorf("forge: message %s has no stamp: %v", real.ID, err)
	}
	epoch, _ := ordering.SplitSeq(st.Seq)
	fake := ordering.Stamp{Producer: st.Producer, Seq: ordering.MakeSeq(epoch, forgedNumber)}
	other, err := ordering.NewStampKeys(bytes.Repeat([]byte{0x5a}, 32))
	if err != nil {
		return err
	}
	client, err := harness.ConnectProject(ctx, srv.Addr, harness.ExampleProject())
	if err != nil {
		return err
	}
	defer client.Close()
	pub := client.Publisher(topicID)
	pub.EnableMessageOrdering = true
	defer pub.Stop()
	for i, sign := range []bool{false, true} {
		data, _ := json.Marshal(event{Version: 1_000_000 + int64(i), Amount: 1_000_000})
		attrs := map[string]string{}
		fake.Put(attrs)
		if sign {
			other.Sign(attrs, real.OrderingKey, fake, data)
		}
		// The story's chaos may fail this publish too: try again.
		for attempt := 1; ; attempt++ {
			_, err := pub.Publish(ctx, &pubsub.Message{Data: data, Attributes: attrs, OrderingKey: real.OrderingKey}).Get(ctx)
			if err == nil {
				break
			}
			if attempt == 10 || ctx.Err() != nil {
				return fmt.Errorf("forge: %w", err)
			}
			pub.ResumePublish(real.OrderingKey)
		}
	}
	return nil
}

// isForged reports whether m carries a forged stamp (see forge).
func isForged(m orderingtest.Message) bool {
	st, err := ordering.ParseStamp(m.Attributes)
	_, n := ordering.SplitSeq(st.Seq)
	return err == nil && n == forgedNumber
}

// signedRight checks the signatures of what the service stored: every
// event's verifies with key, and no forged message's does. It returns how
// many forged messages there were.
func signedRight(stored []orderingtest.Message, key []byte) (forged int, err error) {
	keys, err := ordering.NewStampKeys(key)
	if err != nil {
		return 0, err
	}
	var errs []error
	for _, m := range stored {
		st, err := ordering.ParseStamp(m.Attributes)
		if err != nil || st.IsZero() {
			return forged, fmt.Errorf("message %s of %s: no stamp: %v", m.ID, m.OrderingKey, err)
		}
		err = keys.Verify(m.Attributes, m.OrderingKey, st, m.Data)
		switch {
		case isForged(m) && err == nil:
			errs = append(errs, fmt.Errorf("forged message %s of %s verifies", m.ID, m.OrderingKey))
		case isForged(m):
			forged++
		case err != nil:
			errs = append(errs, fmt.Errorf("message %s of %s: %w", m.ID, m.OrderingKey, err))
		}
	}
	return forged, errors.Join(errs...)
}

// forgedSettled reports whether every forged message stored was delivered
// and the subscription holds no lease: the replicas have dropped them.
func forgedSettled(srv *orderingtest.Server, topic, sub string) bool {
	delivered := map[string]bool{}
	for _, d := range srv.Deliveries(sub) {
		delivered[d.MessageID] = true
	}
	for _, m := range srv.Messages(topic) {
		if isForged(m) && !delivered[m.ID] {
			return false
		}
	}
	return srv.Stats(sub).Outstanding == 0
}

package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"strconv"
	"time"

	"github.com/keyorder/keyorder/internal/harness"
	"github.com/keyorder/keyorder/publisher"
	"github.com/keyorder/keyorder/publisher/outbox"
	"github.com/keyorder/keyorder/subscriber"
	"github.com/keyorder/keyorder/subscriber/inbox"
)

// event is what a change publishes: the account's new version, the amount,
// and when the writer committed it (Unix ns, read just before the commit).
type event struct {
	Version   int64 `json:"version"`
	Amount    int64 `json:"amount"`
	Committed int64 `json:"committed"`
}

func account(i int) string { return fmt.Sprintf("acct-%02d", i) }

// write is a writer process: n changes to random accounts, about pace
// apart, each in one transaction with its event (outbox.Add), so that a
// change and its event commit together or not at all.
func write(ctx context.Context, st *store, ob *outbox.Outbox, seed uint64, accounts, n int, pace time.Duration) error {
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	for range n {
		if pace > 0 {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(time.Duration(rng.Int64N(int64(2 * pace)))):
			}
		}
		key, amount := account(rng.IntN(accounts)+1), int64(rng.IntN(1000)+1)
		if err := retryBusy(ctx, func() error { return change(ctx, st, ob, key, amount) }); err != nil {
			return fmt.Errorf("change %s: %w", key, err)
		}
	}
	return nil
}

// change adds amount to key's balance and moves its version on, and
// writes the event in the same transaction.
func change(ctx context.Context, st *store, ob *outbox.Outbox, key string, amount int64) (err error) {
	tx, err := st.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			_ = tx.Rollback()
		}
	}()
	var version int64
	err = tx.QueryRowContext(ctx, st.q(`INSERT INTO accounts (key, version, balance) VALUES (?, 1, ?)
		ON CONFLICT (key) DO UPDATE SET version = accounts.version + 1, balance = accounts.balance + excluded.balance
		RETURNING version`), key, amount).Scan(&version)
	if err != nil {
		return err
	}
	data, _ := json.Marshal(event{Version: version, Amount: amount, Committed: time.Now().UnixNano()})
	if err := ob.Add(ctx, tx, key, &publisher.Message{Data: data}); err != nil {
		return err
	}
	return tx.Commit()
}

// retryBusy runs f until it succeeds, ctx ends, or it fails 50 times: a
// writer's transaction can lose a race for SQLite's lock past its busy
// timeout under load, and is simply tried again.
func retryBusy(ctx context.Context, f func() error) error {
	var err error
	for range 50 {
		if err = f(); err == nil || ctx.Err() != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
	return err
}

// relay is a relay process: it publishes the outbox until ctx ends.
func relay(ctx context.Context, addr, topic string, ob *outbox.Outbox, opts ...outbox.RelayOption) error {
	client, err := harness.ConnectProject(ctx, addr, harness.ExampleProject())
	if err != nil {
		return err
	}
	defer client.Close()
	// The relay stamps the messages itself, with the outbox's producer ID
	// and each row's number, so its publisher does not.
	pub, err := publisher.New(client, topic, relayPublisherOptions()...)
	if err != nil {
		return err
	}
	defer func() { _ = pub.Close(context.WithoutCancel(ctx)) }()
	r, err := outbox.NewRelay(ob, pub, append(relayOptions(), opts...)...)
	if err != nil {
		return err
	}
	if err := r.Run(ctx); err != nil && !errors.Is(err, context.Canceled) {
		return err
	}
	return nil
}

// replica is a receiver process: it applies the subscription's events
// through the inbox until ctx ends. With a stamp key, it verifies every
// stamp's signature (subscriber.WithStampKey), and drops, acked, what
// comes unproven: only the relays sign, so a message whose stamp does not
// verify is none of the outbox's events, and the inbox could not apply it
// exactly once anyway (it would refuse it and hold its account).
func replica(ctx context.Context, addr, subID string, st *store, in *inbox.Inbox, name string, stampKey []byte) error {
	client, err := harness.ConnectProject(ctx, addr, harness.ExampleProject())
	if err != nil {
		return err
	}
	defer client.Close()
	opts := []subscriber.Option{subscriber.WithWorkers(4)}
	if stampKey != nil {
		opts = append(opts, subscriber.WithStampKey(stampKey))
	}
	sub, err := subscriber.Open(ctx, client, subID, opts...)
	if err != nil {
		return err
	}
	h := in.Handler(func(ctx context.Context, tx *sql.Tx, d *subscriber.Delivery) error {
		return apply(ctx, st, tx, d, name)
	})
	if stampKey != nil {
		h = dropUnproven(h, name)
	}
	err = sub.Receive(ctx, h)
	if err != nil && !errors.Is(err, context.Canceled) {
		return err
	}
	return nil
}

// dropUnproven acks, unrun, a message that reaches h without a stamp: on
// a subscription that verifies signatures, one whose stamp was missing,
// forged or signed with another key.
func dropUnproven(h subscriber.Handler, name string) subscriber.Handler {
	return func(ctx context.Context, d *subscriber.Delivery) error {
		if d.Seq == 0 {
			fmt.Fprintf(os.Stderr, "outbox %s: message %s of %s dropped unrun: %s\n", name, d.ID, d.Key, notProven)
			return nil
		}
		return h(ctx, d)
	}
}

// notProven ends a replica's line about a message it dropped.
const notProven = "its stamp is not proven"

// apply is the effect of one event, in the inbox's transaction: the
// balance, and a line of the journal the check reads.
func apply(ctx context.Context, st *store, tx *sql.Tx, d *subscriber.Delivery, replica string) error {
	var ev event
	if err := json.Unmarshal(d.Data, &ev); err != nil {
		return subscriber.Permanent(fmt.Errorf("message %s: %w", d.ID, err))
	}
	if _, err := tx.ExecContext(ctx, st.q(`INSERT INTO balances (key, balance) VALUES (?, ?)
		ON CONFLICT (key) DO UPDATE SET balance = balances.balance + excluded.balance`), d.Key, ev.Amount); err != nil {
		return err
	}
	_, err := tx.ExecContext(ctx, st.q(`INSERT INTO journal (key, version, amount, committed, applied, replica)
		VALUES (?, ?, ?, ?, ?, ?)`), d.Key, ev.Version, ev.Amount, ev.Committed, time.Now().UnixNano(), replica)
	return err
}

// processName names this process in the journal and the logs.
func processName(role string, id int) string {
	return role + "-" + strconv.Itoa(id) + "-" + strconv.Itoa(os.Getpid())
}

// relayOptions are the story's relay settings: a lease of 2 s, so that a
// killed relay's keys are taken over quickly, and its warnings on stderr.
func relayOptions() []outbox.RelayOption {
	return []outbox.RelayOption{
		outbox.WithLease(2 * time.Second),
		outbox.WithLogger(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))),
	}
}

// relayPublisherOptions are the options of a relay's publisher: no stamps
// (the relay stamps as the outbox), and otherwise the defaults: the
// publisher sends a key once about 1 ms passes without a new message of
// it, and the relay hands over a key's events together.
func relayPublisherOptions() []publisher.Option {
	return []publisher.Option{publisher.WithoutStamps()}
}

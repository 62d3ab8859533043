package inbox_test

import (
	"context"
	"database/sql"
	"log"
	"strconv"

	"github.com/keyorder/keyorder/subscriber"
	"github.com/keyorder/keyorder/subscriber/inbox"
)

// A deposit service applies each deposit once, whichever replica it is
// delivered to and however often: the balance changes in the inbox's
// transaction. db is opened with the driver of the caller's choice, here
// pgx's database/sql adapter (github.com/jackc/pgx/v5/stdlib).
func ExampleInbox_Handler() {
	ctx := context.Background()
	db, err := sql.Open("pgx", "host=/run/postgresql dbname=deposits")
	if err != nil {
		log.Fatal(err)
	}
	ib, err := inbox.New(ctx, db, inbox.PostgreSQL, inbox.WithGapHandler(func(g subscriber.Gap) {
		log.Printf("deposits missing for good: %v", g)
	}))
	if err != nil {
		log.Fatal(err)
	}
	deposit := ib.Handler(func(ctx context.Context, tx *sql.Tx, d *subscriber.Delivery) error {
		amount, err := strconv.ParseInt(string(d.Data), 10, 64)
		if err != nil {
			return subscriber.Permanent(err) // holds, or parks, the account's key
		}
		_, err = tx.ExecContext(ctx, `UPDATE accounts SET balance = balance + $1 WHERE id = $2`, amount, d.Key)
		return err
	})
	var sub *subscriber.Subscription // from subscriber.CreateWithTopic or Open
	if err := sub.Receive(ctx, deposit); err != nil {
		log.Fatal(err)
	}
}

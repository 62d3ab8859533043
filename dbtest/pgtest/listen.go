package pgtest

import (
	"context"

	"github.com/jackc/pgx/v5"

	"github.com/keyorder/keyorder/publisher/outbox"
)

// Listener returns an [outbox.Listener] that LISTENs on a connection of
// its own to dsn: database/sql cannot wait for notifications, pgx can.
func Listener(dsn string) outbox.Listener {
	return func(ctx context.Context, channel string) (<-chan struct{}, error) {
		conn, err := pgx.Connect(ctx, dsn)
		if err != nil {
			return nil, err
		}
		if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{channel}.Sanitize()); err != nil {
			_ = conn.Close(context.Background())
			return nil, err
		}
		ch := make(chan struct{}, 1)
		go func() {
			defer close(ch)
			defer conn.Close(context.Background())
			for {
				if _, err := conn.WaitForNotification(ctx); err != nil {
					return // ctx ended, or the connection broke
				}
				select {
				case ch <- struct{}{}:
				default:
				}
			}
		}()
		return ch, nil
	}
}

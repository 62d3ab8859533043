package subscriber

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/keyorder/keyorder/internal/harness"
	"github.com/keyorder/keyorder/publisher"
)

// TestSnapshotsKeepTheState: the running Receives republish the control
// state as snapshots, so a Receive that starts later finds it in the last
// few snapshot periods of the log and need not read further back. Here
// the park's own events are older than the first window a new Receive
// reads, so only the snapshot can tell it about the park. Not parallel: it
// shortens the snapshot period, which every Receive of the package reads.
func TestSnapshotsKeepTheState(t *testing.T) {
	old := snapshotEvery
	snapshotEvery = 700 * time.Millisecond
	defer func() { snapshotEvery = old }()

	srv, client := harness.Fake(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	opts := []Option{WithParking("parked-snap"), WithMaxAttempts(1), WithBackoff(time.Millisecond, time.Millisecond)}
	s, err := CreateWithTopic(ctx, client, "topic-snap", "sub-snap", opts...)
	require.NoError(t, err)
	p, err := publisher.New(client, s.Topic())
	require.NoError(t, err)
	for _, data := range []string{"k/1", "k/2", "k/3"} {
		_, err := p.Publish(ctx, &publisher.Message{Data: []byte(data)}, publisher.WithOrderingKey("k")).Get(ctx)
		require.NoError(t, err)
	}
	require.NoError(t, p.Close(ctx))

	receive := func(s *Subscription) (stop func()) {
		rctx, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() {
			done <- s.Receive(rctx, func(_ context.Context, d *Delivery) error {
				if string(d.Data) == "k/2" {
					return errInjected
				}
				return nil
			})
		}()
		return func() { cancel(); require.NoError(t, <-done) }
	}
	stop := receive(s)
	control := s.parking.control
	var parkedAt time.Time
	require.NoError(t, srv.WaitFor(ctx, func() bool {
		for _, m := range srv.Messages(control) {
			if strings.Contains(string(m.Data), `"kind":"forward"`) {
				parkedAt = m.PublishTime
				return true
			}
		}
		return false
	}))
	// Wait until the park is older than a new Receive's first window, and
	// a snapshot newer.
	window := 3 * snapshotEvery
	require.NoError(t, srv.WaitFor(ctx, func() bool {
		if time.Since(parkedAt) < window+100*time.Millisecond {
			return false
		}
		msgs := srv.Messages(control)
		for i := len(msgs) - 1; i >= 0; i-- {
			if strings.Contains(string(msgs[i].Data), `"last":true`) {
				return time.Since(msgs[i].PublishTime) < snapshotEvery
			}
		}
		return false
	}))
	stop()

	again, err := Open(ctx, client, s.Name(), opts...)
	require.NoError(t, err)
	opened := srv.Stats(s.Name()).StreamsOpened
	stop = receive(again)
	defer stop()
	require.NoError(t, srv.WaitFor(ctx, func() bool { return srv.Stats(s.Name()).StreamsOpened > opened }), "the new Receive caught up")
	list, err := again.Parked(ctx)
	require.NoError(t, err)
	require.Len(t, list, 1)
	assert.Equal(t, "k", list[0].Key)
	assert.Equal(t, 2, list[0].Messages)
	assert.Equal(t, 1, again.current.Load().park.f.follows, "the first window held a snapshot")
}

var errInjected = errorString("injected handler failure")

type errorString string

func (e errorString) Error() string { return string(e) }

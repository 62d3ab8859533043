package main

import (
	"context"
	"testing"
	"time"

	"cloud.google.com/go/pubsub/v2"
	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/keyorder/keyorder/ordering/orderingtest"
)

// waitStatus polls fs until entry id's status satisfies cond.
func waitStatus(t *testing.T, ctx context.Context, fs *faults, id int, cond func(status) bool) status {
	t.Helper()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		for _, st := range fs.list() {
			if st.ID == id && cond(st) {
				return st
			}
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
			t.Fatalf("fault %d never got there: %+v", id, fs.list())
		}
	}
}

// TestScheduleLifetime: a hold made at=... ends by itself after for=...,
// and the publish it held completes.
func TestScheduleLifetime(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	srv := orderingtest.Start(t)
	fs := newFaults(srv)
	defer fs.close()
	client, err := srv.Client(ctx, "p")
	require.NoError(t, err)
	defer client.Close()
	topic := "projects/p/topics/orders"
	_, err = client.TopicAdminClient.CreateTopic(ctx, &pubsubpb.Topic{Name: topic})
	require.NoError(t, err)

	spec, err := parseFault("hold-publish,key=k,at=300ms,for=1s")
	require.NoError(t, err)
	st := fs.add(spec)
	assert.Zero(t, st.Applied, "not yet")
	waitStatus(t, ctx, fs, st.ID, func(st status) bool { return st.Applied == 1 })

	p := client.Publisher(topic)
	defer p.Stop()
	p.EnableMessageOrdering = true
	_, err = p.Publish(ctx, &pubsub.Message{Data: []byte("x"), OrderingKey: "k"}).Get(ctx)
	require.NoError(t, err, "released when the hold's time was up")
	assert.Equal(t, 1, waitStatus(t, ctx, fs, st.ID, func(status) bool { return true }).Hits)
}

// TestScheduleEvery: a spec applies again and again until removed, and
// close stops what is left.
func TestScheduleEvery(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	srv := orderingtest.Start(t)
	fs := newFaults(srv)

	every, err := parseFault("break-streams,every=20ms")
	require.NoError(t, err)
	st := fs.add(every)
	assert.Equal(t, 1, st.Applied, "at once, then every 20ms")
	waitStatus(t, ctx, fs, st.ID, func(st status) bool { return st.Applied >= 3 })
	assert.True(t, fs.remove(st.ID))
	assert.False(t, fs.remove(st.ID))
	assert.Empty(t, fs.list())

	later, err := parseFault("fail-publish,at=1h,for=1h")
	require.NoError(t, err)
	fs.add(later)
	fs.close() // returns at once; TestMain checks that no goroutine is left
}

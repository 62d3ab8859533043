package controllog

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestClaimable: a Receive claims a request whose park has no releaser or
// is its own, waits for another releaser's claim to lapse, and for its
// own backoff on the key.
func TestClaimable(t *testing.T) {
	t.Parallel()
	now := time.Now()
	const lease = 30 * time.Second
	pending := []PendingRelease{
		{Key: "free"},
		{Key: "mine", Owner: "me", Beat: now},
		{Key: "theirs", Owner: "them", Beat: now.Add(-10 * time.Second)},
		{Key: "lapsed", Owner: "them", Beat: now.Add(-lease - time.Second)},
		{Key: "backing-off"},
	}
	after := func(key string) time.Time {
		if key == "backing-off" {
			return now.Add(5 * time.Second)
		}
		return time.Time{}
	}
	claim, next := Claimable(pending, "me", lease, now, after)
	var keys []string
	for _, c := range claim {
		keys = append(keys, c.Key)
	}
	assert.Equal(t, []string{"free", "mine", "lapsed"}, keys)
	assert.Equal(t, now.Add(5*time.Second), next, "the soonest of the backoff and the other's lapse")
	_, next = Claimable(pending[2:3], "me", lease, now, after)
	assert.Equal(t, now.Add(20*time.Second), next, "another's claim lapses lease after its last sign of life")
}

// TestAskAwaitWithdraw: the protocol on the fake, between an asker's Log
// and a releaser's: a request recorded on a park is pending; withdrawn, it
// ends with the key parked; asked again, a failed release ends it with
// the message's error; a release that unparks ends it with nil.
func TestAskAwaitWithdraw(t *testing.T) {
	t.Parallel()
	_, client, cfg := fake(t)
	asker, releaser := open(t, client, cfg), open(t, client, cfg)
	ctx := testContext(t)
	_, err := asker.Ask(ctx, "k", "operator")
	require.ErrorIs(t, err, ErrNotParked)
	v, err := releaser.Record(ctx, Event{Kind: Park, Key: "k", Msg: "m1", Err: "boom"})
	require.NoError(t, err)
	require.NoError(t, asker.Sync(ctx))

	req, err := asker.Ask(ctx, "k", "operator")
	require.NoError(t, err)
	assert.Equal(t, v.ParkID, req.ParkID)
	assert.Equal(t, "operator", req.By)
	require.NotNil(t, asker.Pending("k", req.ParkID))
	require.NoError(t, asker.Withdraw(ctx, "k"))
	assert.ErrorIs(t, asker.Withdraw(ctx, "k"), ErrNoRequest)
	var ended *RequestEnded
	require.ErrorAs(t, asker.Await(ctx, req), &ended, "withdrawn: ended, the key parked")

	req, err = asker.Ask(ctx, "k", "operator")
	require.NoError(t, err)
	require.NoError(t, releaser.Sync(ctx))
	_, err = releaser.Record(ctx, Event{Kind: Claim, Key: "k", ParkID: req.ParkID})
	require.NoError(t, err)
	require.NoError(t, asker.Sync(ctx))
	assert.ErrorIs(t, asker.Withdraw(ctx, "k"), ErrReleasing, "a release runs")
	require.NoError(t, releaser.Publish(ctx, Event{Kind: Stop, Key: "k", ParkID: req.ParkID, Msg: "m1", Err: "still broken"}))
	require.ErrorAs(t, asker.Await(ctx, req), &ended)
	assert.Equal(t, &RequestEnded{Msg: "m1", Err: "still broken"}, ended)

	req, err = asker.Ask(ctx, "k", "operator")
	require.NoError(t, err)
	require.NoError(t, releaser.Sync(ctx))
	_, err = releaser.Record(ctx, Event{Kind: Claim, Key: "k", ParkID: req.ParkID})
	require.NoError(t, err)
	_, err = releaser.Record(ctx, Event{Kind: Unpark, Key: "k", ParkID: req.ParkID, N: 0})
	require.NoError(t, err)
	assert.NoError(t, asker.Await(ctx, req), "unparked")
}

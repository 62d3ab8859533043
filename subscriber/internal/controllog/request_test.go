package controllog

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestRequestClaims: a claim that carries out a request holds only while
// that request does. One that lands after the request was withdrawn, or
// ended, or while no request is pending, or after another request took
// its place, is refused, and no release starts; a Release's own claim,
// naming no request, is not bound by one.
func TestRequestClaims(t *testing.T) {
	t.Parallel()
	const k = "acct-1"
	asked := start.Add(time.Second)
	s := newCtlState(testLease)
	step := func(ev event, after time.Duration) Verdict { return s.apply(&ev, start.Add(after)) }
	require.True(t, step(event{Kind: Park, Key: k, Park: "p1"}, 0).Applied)
	assert.False(t, step(event{Kind: Claim, Key: k, Park: "p1", By: "a", Asked: asked}, 0).Applied, "no request pending")
	require.True(t, step(event{Kind: Request, Key: k, Park: "p1", By: "o1"}, time.Second).Applied)
	require.True(t, step(event{Kind: Withdraw, Key: k, Park: "p1", By: "o1"}, 2*time.Second).Applied)
	v := step(event{Kind: Claim, Key: k, Park: "p1", By: "a", Asked: asked}, 3*time.Second)
	assert.False(t, v.Applied, "the claim lands after the withdraw")
	assert.Equal(t, "p1", v.ParkID)
	assert.Empty(t, s.record(k).Owner, "nobody releases")
	assert.Equal(t, asked, s.record(k).Withdrawn, "the log keeps which request was withdrawn")

	require.True(t, step(event{Kind: Request, Key: k, Park: "p1", By: "o1"}, 4*time.Second).Applied)
	assert.False(t, step(event{Kind: Claim, Key: k, Park: "p1", By: "a", Asked: asked}, 5*time.Second).Applied, "a claim of the old request")
	assert.True(t, step(event{Kind: Claim, Key: k, Park: "p1", By: "a", Asked: start.Add(4 * time.Second)}, 5*time.Second).Applied)
	assert.True(t, step(event{Kind: Claim, Key: k, Park: "p1", By: "a"}, 6*time.Second).Applied, "its heartbeat")
	require.True(t, step(event{Kind: Stop, Key: k, Park: "p1", By: "a", Msg: "m1", Err: "again"}, 7*time.Second).Applied)
	assert.False(t, step(event{Kind: Claim, Key: k, Park: "p1", By: "b", Asked: start.Add(4 * time.Second)}, 8*time.Second).Applied, "the request ended with the failure")
	assert.True(t, step(event{Kind: Claim, Key: k, Park: "p1", By: "b"}, 8*time.Second).Applied, "a Release's own claim")
}

// TestWireFormatOfClaims pins the fields added with request claims
// (a claim's asked, a park's withdrawn, an ended park's key), beside
// TestWireFormat's, which they change nothing of.
func TestWireFormatOfClaims(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC)
	for _, tc := range []struct {
		ev   *event
		want string
	}{
		{&event{Kind: Claim, By: "r2", Seq: 2, Key: "k", Park: "p1", Asked: at},
			`{"kind":"claim","by":"r2","seq":2,"key":"k","park":"p1","asked":"2026-01-02T03:04:05.000000006Z"}`},
		{&event{Kind: evSnapshot, By: "r1", Nonce: "n1", Part: &snapshotPart{
			Keys:  []*ParkRecord{{Key: "k", ParkID: "p1", Since: at, Withdrawn: at}},
			Ended: []*endedPark{{Park: "p0", At: at, IDs: []string{"m0"}, Key: "k"}},
		}, Last: true},
			`{"kind":"snapshot","by":"r1","nonce":"n1","part":{"keys":[{"key":"k","park":"p1","since":"2026-01-02T03:04:05.000000006Z","msg":"","err":"","ids":null,"withdrawn":"2026-01-02T03:04:05.000000006Z"}],"ended":[{"park":"p0","at":"2026-01-02T03:04:05.000000006Z","ids":["m0"],"key":"k"}]},"last":true}`},
	} {
		t.Run(string(tc.ev.Kind), func(t *testing.T) {
			data, err := encodeEvent(tc.ev)
			require.NoError(t, err)
			assert.Equal(t, tc.want, string(data))
			back, err := decodeEvent(data)
			require.NoError(t, err)
			again, err := encodeEvent(back)
			require.NoError(t, err)
			assert.Equal(t, tc.want, string(again))
		})
	}
}

// TestUnparked: the log tells, for an hour, that a key's park ended, so
// that a release asked for again is told it ran; a snapshot keeps it.
func TestUnparked(t *testing.T) {
	t.Parallel()
	s := newCtlState(testLease)
	for _, ev := range []event{
		{Kind: Park, Key: "k", Park: "p1"},
		{Kind: Forward, Key: "k", Park: "p1", IDs: []string{"m1"}},
		{Kind: Claim, Key: "k", Park: "p1", By: "a"},
		{Kind: Progress, Key: "k", Park: "p1", By: "a", IDs: []string{"m1"}},
		{Kind: Unpark, Key: "k", Park: "p1", By: "a", N: 1},
	} {
		require.True(t, s.apply(&ev, start.Add(time.Second)).Applied, "%+v", ev)
	}
	at, ok := s.unparked("k")
	assert.True(t, ok)
	assert.Equal(t, start.Add(time.Second), at)
	_, ok = s.unparked("other")
	assert.False(t, ok)
	at, ok = fromSnapshot(snapshotOf(s), testLease).unparked("k")
	assert.True(t, ok, "a snapshot keeps it")
	assert.Equal(t, start.Add(time.Second), at)
	s.prune(start.Add(releasedKeep + 2*time.Second))
	_, ok = s.unparked("k")
	assert.False(t, ok, "forgotten after an hour")
}

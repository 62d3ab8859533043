package controllog

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestWireFormat pins the encoding of every kind of event, byte for byte:
// processes of every version that receive a subscription share its log,
// so a field's name never changes. The expected lines were written by
// the code before the log had a package of its own; those of Request, and
// of a park's pending request in a snapshot, were added with them, and
// Withdraw's after; they change none of the others.
func TestWireFormat(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC)
	written := func(ev Event, by string, seq uint64) *event {
		e := ev.entry()
		e.By, e.Seq = by, seq
		return e
	}
	s := newCtlState(testLease)
	for _, ev := range []*event{
		{Kind: Park, Key: "k", Park: "p1", Msg: "m1", Err: "boom"},
		{Kind: Forward, Key: "k", Park: "p1", IDs: []string{"m1", "m2"}},
		{Kind: Claim, By: "r2", Key: "k", Park: "p1"},
		{Kind: Progress, By: "r2", Key: "k", Park: "p1", IDs: []string{"m1"}},
		{Kind: Park, Key: "j", Park: "p2"},
		{Kind: Claim, By: "r3", Key: "j", Park: "p2"},
		{Kind: Unpark, By: "r3", Key: "j", Park: "p2", N: 0},
	} {
		require.True(t, s.apply(ev, at).Applied, "%+v", ev)
	}
	parts := snapshotOf(s)
	require.Len(t, parts, 1)
	for _, tc := range []struct {
		ev   *event
		want string
	}{
		{written(Event{Kind: Park, Key: "k", ParkID: "p1", Msg: "m1", Err: "boom"}, "r1", 1),
			`{"kind":"park","by":"r1","seq":1,"key":"k","park":"p1","msg":"m1","err":"boom"}`},
		{written(Event{Kind: Forward, Key: "k", ParkID: "p1", IDs: []string{"m1", "m2"}}, "r1", 2),
			`{"kind":"forward","by":"r1","seq":2,"key":"k","park":"p1","ids":["m1","m2"]}`},
		{written(Event{Kind: Claim, Key: "k", ParkID: "p1"}, "r2", 3),
			`{"kind":"claim","by":"r2","seq":3,"key":"k","park":"p1"}`},
		{written(Event{Kind: Progress, Key: "k", ParkID: "p1", IDs: []string{"m1"}}, "r2", 0),
			`{"kind":"progress","by":"r2","key":"k","park":"p1","ids":["m1"]}`},
		{written(Event{Kind: Stop, Key: "k", ParkID: "p1", Msg: "m2", Err: "again"}, "r2", 0),
			`{"kind":"stop","by":"r2","key":"k","park":"p1","msg":"m2","err":"again"}`},
		{written(Event{Kind: Unpark, Key: "k", ParkID: "p1", N: 2}, "r2", 4),
			`{"kind":"unpark","by":"r2","seq":4,"key":"k","park":"p1","n":2}`},
		{written(Event{Kind: Request, Key: "k", ParkID: "p1", From: "parkctl on ops-1 (pid 42)"}, "r4", 1),
			`{"kind":"release-request","by":"r4","seq":1,"key":"k","park":"p1","from":"parkctl on ops-1 (pid 42)"}`},
		{written(Event{Kind: Withdraw, Key: "k", ParkID: "p1"}, "r5", 2),
			`{"kind":"release-withdraw","by":"r5","seq":2,"key":"k","park":"p1"}`},
		{&event{Kind: evMarker, By: "r1", Seq: 5},
			`{"kind":"marker","by":"r1","seq":5}`},
		{&event{Kind: evSnapshotBegin, By: "r1", Seq: 6, Nonce: "n1"},
			`{"kind":"snapshot-begin","by":"r1","seq":6,"nonce":"n1"}`},
		{&event{Kind: evSnapshot, By: "r1", Nonce: "n1", Part: parts[0], Last: true},
			`{"kind":"snapshot","by":"r1","nonce":"n1","part":{"keys":[{"key":"k","park":"p1","since":"2026-01-02T03:04:05.000000006Z","msg":"m1","err":"boom","ids":["m1","m2"],"released":["m1"],"owner":"r2","beat":"2026-01-02T03:04:05.000000006Z"}],"ended":[{"park":"p2","at":"2026-01-02T03:04:05.000000006Z"}]},"last":true}`},
		{&event{Kind: evSnapshot, By: "r1", Nonce: "n2", Part: &snapshotPart{Keys: []*ParkRecord{{
			Key: "k", ParkID: "p1", Since: at, IDs: []string{"m1"}, Requested: at, Requester: "ops",
		}}}, Last: true},
			`{"kind":"snapshot","by":"r1","nonce":"n2","part":{"keys":[{"key":"k","park":"p1","since":"2026-01-02T03:04:05.000000006Z","msg":"","err":"","ids":["m1"],"requested":"2026-01-02T03:04:05.000000006Z","requester":"ops"}]},"last":true}`},
	} {
		t.Run(string(tc.ev.Kind), func(t *testing.T) {
			data, err := encodeEvent(tc.ev)
			require.NoError(t, err)
			assert.Equal(t, tc.want, string(data))
			back, err := decodeEvent([]byte(tc.want))
			require.NoError(t, err)
			again, err := encodeEvent(back)
			require.NoError(t, err)
			assert.Equal(t, tc.want, string(again), "a round trip changes nothing")
		})
	}
}

// TestParkGetsAnID: a Park event left without a park ID gets a new one,
// different each time; one with an ID keeps it.
func TestParkGetsAnID(t *testing.T) {
	t.Parallel()
	a, b := Event{Kind: Park, Key: "k"}.entry(), Event{Kind: Park, Key: "k"}.entry()
	assert.Len(t, a.Park, 16)
	assert.NotEqual(t, a.Park, b.Park)
	assert.Equal(t, "p1", Event{Kind: Park, Key: "k", ParkID: "p1"}.entry().Park)
	assert.Empty(t, Event{Kind: Forward, Key: "k"}.entry().Park, "only a park is given one")
}

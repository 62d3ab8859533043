package controllog

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// bigState parks keys with many messages, some released, and ends a park,
// so that its snapshot takes several parts.
func bigState(t *testing.T) *ctlState {
	s := newCtlState(testLease)
	at := start
	apply := func(ev event) {
		at = at.Add(time.Millisecond)
		require.True(t, s.apply(&ev, at).Applied, "%+v", ev)
	}
	ids := func(prefix string, n int) []string {
		out := make([]string, n)
		for i := range out {
			out[i] = fmt.Sprintf("%s-%d", prefix, i)
		}
		return out
	}
	apply(event{Kind: Park, Key: "big", Park: "pb", Msg: "big-0", Err: "boom"})
	apply(event{Kind: Forward, Key: "big", Park: "pb", IDs: ids("big", 2*snapshotIDs+5)})
	apply(event{Kind: Claim, Key: "big", Park: "pb", By: "r1"})
	apply(event{Kind: Progress, Key: "big", Park: "pb", By: "r1", IDs: ids("big", snapshotIDs+3)})
	for i := range 3 {
		key := fmt.Sprintf("small-%d", i)
		apply(event{Kind: Park, Key: key, Park: "ps" + key})
		apply(event{Kind: Forward, Key: key, Park: "ps" + key, IDs: ids(key, 3)})
	}
	apply(event{Kind: Request, Key: "big", Park: "pb", By: "o1", From: "ops"})
	apply(event{Kind: Request, Key: "small-2", Park: "pssmall-2", By: "o2"})
	apply(event{Kind: Claim, Key: "small-1", Park: "pssmall-1", By: "r2"})
	apply(event{Kind: Progress, Key: "small-1", Park: "pssmall-1", By: "r2", IDs: ids("small-1", 3)})
	apply(event{Kind: Unpark, Key: "small-1", Park: "pssmall-1", By: "r2", N: 3})
	return s
}

// TestSnapshotRoundTrip checks that a state split into snapshot parts, each
// through JSON, is the same state again.
func TestSnapshotRoundTrip(t *testing.T) {
	t.Parallel()
	s := bigState(t)
	parts := snapshotOf(s)
	require.Greater(t, len(parts), 2, "the big park spans parts")
	var decoded []*snapshotPart
	for i, p := range parts {
		data, err := encodeEvent(&event{Kind: evSnapshot, Nonce: "n", Part: p, Last: i == len(parts)-1})
		require.NoError(t, err)
		assert.Less(t, len(data), 2_000_000, "part %d", i)
		ev, err := decodeEvent(data)
		require.NoError(t, err)
		decoded = append(decoded, ev.Part)
	}
	got := fromSnapshot(decoded, testLease)
	assert.Equal(t, s.list(), got.list())
	for key := range s.keys {
		assert.Equal(t, s.record(key), got.record(key), key)
	}
	assert.Equal(t, s.released, got.released)
	assert.Len(t, got.pendingReleases(), 2)
	assert.Equal(t, s.pendingReleases(), got.pendingReleases())
	assert.Equal(t, len(s.ended), len(got.ended))
}

// TestReplayFromASnapshot checks the replay rules: a replay that starts
// anywhere before a snapshot's begin ends, once past the snapshot's last
// part, with the state of a replay of the whole log, and it is whole only
// then; events published between the begin and the last part, which the
// snapshot does not hold, are applied on top of it.
func TestReplayFromASnapshot(t *testing.T) {
	t.Parallel()
	type entry struct {
		ev *event
		at time.Time
	}
	var log []entry
	at := start
	add := func(ev *event) {
		at = at.Add(time.Millisecond)
		log = append(log, entry{ev, at})
	}
	add(&event{Kind: Park, Key: "a", Park: "pa"})
	add(&event{Kind: Forward, Key: "a", Park: "pa", IDs: []string{"a1", "a2"}})
	add(&event{Kind: Park, Key: "b", Park: "pb"})
	// A snapshot: its begin, the state there, and an event published
	// between the begin and the parts.
	add(&event{Kind: evSnapshotBegin, Nonce: "s1"})
	atBegin := newLogReplay(testLease)
	for _, e := range log {
		atBegin.apply(e.ev, e.at)
	}
	parts := snapshotOf(atBegin.state)
	add(&event{Kind: Forward, Key: "b", Park: "pb", IDs: []string{"b1"}})
	for i, p := range parts {
		add(&event{Kind: evSnapshot, Nonce: "s1", Part: p, Last: i == len(parts)-1})
	}
	add(&event{Kind: Forward, Key: "a", Park: "pa", IDs: []string{"a3"}})

	full := newLogReplay(testLease)
	for _, e := range log {
		full.apply(e.ev, e.at)
	}
	want := full.state.list()
	require.Len(t, want, 2)
	assert.Equal(t, 3, want[0].Messages)
	assert.Equal(t, 1, want[1].Messages)

	for from := 0; from <= 3; from++ { // up to the begin
		rp := newLogReplay(testLease)
		for i, e := range log[from:] {
			rp.apply(e.ev, e.at)
			if from+i < 5 {
				assert.False(t, rp.whole, "whole before the snapshot's last part")
			}
		}
		assert.True(t, rp.whole, "from %d", from)
		assert.Equal(t, want, rp.state.list(), "from %d", from)
		assert.Equal(t, log[5].at, rp.lastSnapshot)
	}
	// A replay that starts after the begin cannot use the snapshot.
	rp := newLogReplay(testLease)
	for _, e := range log[4:] {
		rp.apply(e.ev, e.at)
	}
	assert.False(t, rp.whole)
}

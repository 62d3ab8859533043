package subscriber

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// logStep is one event of a test log and the verdict it must get.
type logStep struct {
	ev      event
	after   time.Duration // publish time, from the log's start
	applied bool
	park    string // the key's park after it
}

// TestCtlStateVerdicts applies a log to a state and checks each verdict:
// the compare-and-set rules that let processes race on the log.
func TestCtlStateVerdicts(t *testing.T) {
	t.Parallel()
	const k = "acct-1"
	for _, tc := range []struct {
		name  string
		steps []logStep
		check func(t *testing.T, s *ctlState)
	}{
		{"park and forward", []logStep{
			{ev: event{Kind: evPark, Key: k, Park: "p1", Msg: "m1", Err: "boom"}, applied: true, park: "p1"},
			{ev: event{Kind: evPark, Key: k, Park: "p2", Msg: "m9"}, applied: false, park: "p1"}, // the race's loser learns p1
			{ev: event{Kind: evForward, Key: k, Park: "p1", IDs: []string{"m1", "m2"}}, applied: true, park: "p1"},
			{ev: event{Kind: evForward, Key: k, Park: "p1", IDs: []string{"m2", "m3"}}, applied: true, park: "p1"}, // m2 again: once
			{ev: event{Kind: evForward, Key: k, Park: "p2", IDs: []string{"m4"}}, applied: false, park: "p1"},
			{ev: event{Kind: evForward, Key: "other", Park: "p1", IDs: []string{"m4"}}, applied: false},
		}, func(t *testing.T, s *ctlState) {
			rec := s.record(k)
			assert.Equal(t, []string{"m1", "m2", "m3"}, rec.IDs)
			assert.Equal(t, []ParkedKey{{Key: k, Since: start, Messages: 3, MessageID: "m1", LastError: "boom"}}, s.list())
		}},
		{"claims", []logStep{
			{ev: event{Kind: evPark, Key: k, Park: "p1"}, applied: true, park: "p1"},
			{ev: event{Kind: evClaim, Key: k, Park: "p1", By: "a"}, applied: true, park: "p1"},
			{ev: event{Kind: evClaim, Key: k, Park: "p1", By: "b"}, after: releaseLease, applied: false, park: "p1"},
			{ev: event{Kind: evClaim, Key: k, Park: "p1", By: "a"}, after: releaseLease, applied: true, park: "p1"},        // a heartbeat
			{ev: event{Kind: evProgress, Key: k, Park: "p1", By: "a"}, after: 2 * releaseLease, applied: true, park: "p1"}, // a sign of life too
			{ev: event{Kind: evClaim, Key: k, Park: "p1", By: "b"}, after: 3 * releaseLease, applied: false, park: "p1"},
			{ev: event{Kind: evClaim, Key: k, Park: "p1", By: "b"}, after: 3*releaseLease + time.Millisecond, applied: true, park: "p1"}, // a lapsed
			{ev: event{Kind: evStop, Key: k, Park: "p1", By: "a"}, after: 4 * releaseLease, applied: false, park: "p1"},
			{ev: event{Kind: evStop, Key: k, Park: "p1", By: "b", Msg: "m7", Err: "again"}, after: 4 * releaseLease, applied: true, park: "p1"},
			{ev: event{Kind: evClaim, Key: k, Park: "p1", By: "a"}, after: 4 * releaseLease, applied: true, park: "p1"},
		}, func(t *testing.T, s *ctlState) {
			rec := s.record(k)
			assert.Equal(t, "a", rec.Owner)
			assert.Equal(t, "again", rec.Err)
			assert.Equal(t, "m7", rec.Msg)
		}},
		{"unpark", []logStep{
			{ev: event{Kind: evPark, Key: k, Park: "p1"}, applied: true, park: "p1"},
			{ev: event{Kind: evForward, Key: k, Park: "p1", IDs: []string{"m1", "m2"}}, applied: true, park: "p1"},
			{ev: event{Kind: evUnpark, Key: k, Park: "p1", By: "a", N: 2}, applied: false, park: "p1"}, // no claim
			{ev: event{Kind: evClaim, Key: k, Park: "p1", By: "a"}, applied: true, park: "p1"},
			{ev: event{Kind: evProgress, Key: k, Park: "p1", By: "a", IDs: []string{"m1", "m9"}}, applied: true, park: "p1"}, // m9 was never parked
			{ev: event{Kind: evUnpark, Key: k, Park: "p1", By: "a", N: 2}, applied: false, park: "p1"},                       // m2 has not run
			{ev: event{Kind: evProgress, Key: k, Park: "p1", By: "a", IDs: []string{"m2"}}, applied: true, park: "p1"},
			{ev: event{Kind: evForward, Key: k, Park: "p1", IDs: []string{"m3"}}, applied: true, park: "p1"},
			{ev: event{Kind: evUnpark, Key: k, Park: "p1", By: "a", N: 2}, applied: false, park: "p1"}, // m3 came meanwhile
			{ev: event{Kind: evProgress, Key: k, Park: "p1", By: "a", IDs: []string{"m3"}}, applied: true, park: "p1"},
			{ev: event{Kind: evUnpark, Key: k, Park: "p1", By: "a", N: 3}, applied: true},
			{ev: event{Kind: evForward, Key: k, Park: "p1", IDs: []string{"m4"}}, applied: false}, // late: runs from the subscription
			{ev: event{Kind: evPark, Key: k, Park: "p1"}, applied: false},                         // an ended park never comes back
			{ev: event{Kind: evPark, Key: k, Park: "p2"}, after: time.Second, applied: true, park: "p2"},
		}, func(t *testing.T, s *ctlState) {
			assert.Equal(t, map[string]string{"m1": "p1", "m2": "p1", "m3": "p1"}, s.released)
			s.prune(start.Add(releasedKeep + 2*time.Second))
			assert.Empty(t, s.released, "forgotten once they cannot come back")
			assert.Contains(t, s.ended, "p1")
			s.prune(start.Add(controlRetention + 2*time.Second))
			assert.Empty(t, s.ended)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newCtlState()
			for i, st := range tc.steps {
				v := s.apply(&st.ev, start.Add(st.after))
				assert.Equal(t, st.applied, v.applied, "step %d: %+v", i, st.ev)
				assert.Equal(t, st.park, v.park, "step %d: %+v", i, st.ev)
			}
			tc.check(t, s)
		})
	}
}

var start = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

// bigState parks keys with many messages, some released, and ends a park,
// so that its snapshot takes several parts.
func bigState(t *testing.T) *ctlState {
	s := newCtlState()
	at := start
	apply := func(ev event) {
		at = at.Add(time.Millisecond)
		require.True(t, s.apply(&ev, at).applied, "%+v", ev)
	}
	ids := func(prefix string, n int) []string {
		out := make([]string, n)
		for i := range out {
			out[i] = fmt.Sprintf("%s-%d", prefix, i)
		}
		return out
	}
	apply(event{Kind: evPark, Key: "big", Park: "pb", Msg: "big-0", Err: "boom"})
	apply(event{Kind: evForward, Key: "big", Park: "pb", IDs: ids("big", 2*snapshotIDs+5)})
	apply(event{Kind: evClaim, Key: "big", Park: "pb", By: "r1"})
	apply(event{Kind: evProgress, Key: "big", Park: "pb", By: "r1", IDs: ids("big", snapshotIDs+3)})
	for i := range 3 {
		key := fmt.Sprintf("small-%d", i)
		apply(event{Kind: evPark, Key: key, Park: "ps" + key})
		apply(event{Kind: evForward, Key: key, Park: "ps" + key, IDs: ids(key, 3)})
	}
	apply(event{Kind: evClaim, Key: "small-1", Park: "pssmall-1", By: "r2"})
	apply(event{Kind: evProgress, Key: "small-1", Park: "pssmall-1", By: "r2", IDs: ids("small-1", 3)})
	apply(event{Kind: evUnpark, Key: "small-1", Park: "pssmall-1", By: "r2", N: 3})
	return s
}

// TestSnapshotRoundTrip checks that a state split into snapshot parts, each
// through JSON, is the same state again.
func TestSnapshotRoundTrip(t *testing.T) {
	t.Parallel()
	s := bigState(t)
	parts := s.snapshot()
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
	got := fromSnapshot(decoded)
	assert.Equal(t, s.list(), got.list())
	for key := range s.keys {
		assert.Equal(t, s.record(key), got.record(key), key)
	}
	assert.Equal(t, s.released, got.released)
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
	add(&event{Kind: evPark, Key: "a", Park: "pa"})
	add(&event{Kind: evForward, Key: "a", Park: "pa", IDs: []string{"a1", "a2"}})
	add(&event{Kind: evPark, Key: "b", Park: "pb"})
	// A snapshot: its begin, the state there, and an event published
	// between the begin and the parts.
	add(&event{Kind: evSnapshotBegin, Nonce: "s1"})
	atBegin := newLogReplay()
	for _, e := range log {
		atBegin.apply(e.ev, e.at)
	}
	parts := atBegin.state.snapshot()
	add(&event{Kind: evForward, Key: "b", Park: "pb", IDs: []string{"b1"}})
	for i, p := range parts {
		add(&event{Kind: evSnapshot, Nonce: "s1", Part: p, Last: i == len(parts)-1})
	}
	add(&event{Kind: evForward, Key: "a", Park: "pa", IDs: []string{"a3"}})

	full := newLogReplay()
	for _, e := range log {
		full.apply(e.ev, e.at)
	}
	want := full.state.list()
	require.Len(t, want, 2)
	assert.Equal(t, 3, want[0].Messages)
	assert.Equal(t, 1, want[1].Messages)

	for from := 0; from <= 3; from++ { // up to the begin
		rp := newLogReplay()
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
	rp := newLogReplay()
	for _, e := range log[4:] {
		rp.apply(e.ev, e.at)
	}
	assert.False(t, rp.whole)
}

package controllog

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
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
			{ev: event{Kind: Park, Key: k, Park: "p1", Msg: "m1", Err: "boom"}, applied: true, park: "p1"},
			{ev: event{Kind: Park, Key: k, Park: "p2", Msg: "m9"}, applied: false, park: "p1"}, // the race's loser learns p1
			{ev: event{Kind: Forward, Key: k, Park: "p1", IDs: []string{"m1", "m2"}}, applied: true, park: "p1"},
			{ev: event{Kind: Forward, Key: k, Park: "p1", IDs: []string{"m2", "m3"}}, applied: true, park: "p1"}, // m2 again: once
			{ev: event{Kind: Forward, Key: k, Park: "p2", IDs: []string{"m4"}}, applied: false, park: "p1"},
			{ev: event{Kind: Forward, Key: "other", Park: "p1", IDs: []string{"m4"}}, applied: false},
		}, func(t *testing.T, s *ctlState) {
			rec := s.record(k)
			assert.Equal(t, []string{"m1", "m2", "m3"}, rec.IDs)
			assert.Equal(t, []Summary{{Key: k, Since: start, Messages: 3, MessageID: "m1", LastError: "boom"}}, s.list())
		}},
		{"claims", []logStep{
			{ev: event{Kind: Park, Key: k, Park: "p1"}, applied: true, park: "p1"},
			{ev: event{Kind: Claim, Key: k, Park: "p1", By: "a"}, applied: true, park: "p1"},
			{ev: event{Kind: Claim, Key: k, Park: "p1", By: "b"}, after: testLease, applied: false, park: "p1"},
			{ev: event{Kind: Claim, Key: k, Park: "p1", By: "a"}, after: testLease, applied: true, park: "p1"},        // a heartbeat
			{ev: event{Kind: Progress, Key: k, Park: "p1", By: "a"}, after: 2 * testLease, applied: true, park: "p1"}, // a sign of life too
			{ev: event{Kind: Claim, Key: k, Park: "p1", By: "b"}, after: 3 * testLease, applied: false, park: "p1"},
			{ev: event{Kind: Claim, Key: k, Park: "p1", By: "b"}, after: 3*testLease + time.Millisecond, applied: true, park: "p1"}, // a lapsed
			{ev: event{Kind: Stop, Key: k, Park: "p1", By: "a"}, after: 4 * testLease, applied: false, park: "p1"},
			{ev: event{Kind: Stop, Key: k, Park: "p1", By: "b", Msg: "m7", Err: "again"}, after: 4 * testLease, applied: true, park: "p1"},
			{ev: event{Kind: Claim, Key: k, Park: "p1", By: "a"}, after: 4 * testLease, applied: true, park: "p1"},
		}, func(t *testing.T, s *ctlState) {
			rec := s.record(k)
			assert.Equal(t, "a", rec.Owner)
			assert.Equal(t, "again", rec.Err)
			assert.Equal(t, "m7", rec.Msg)
		}},
		{"unpark", []logStep{
			{ev: event{Kind: Park, Key: k, Park: "p1"}, applied: true, park: "p1"},
			{ev: event{Kind: Forward, Key: k, Park: "p1", IDs: []string{"m1", "m2"}}, applied: true, park: "p1"},
			{ev: event{Kind: Unpark, Key: k, Park: "p1", By: "a", N: 2}, applied: false, park: "p1"}, // no claim
			{ev: event{Kind: Claim, Key: k, Park: "p1", By: "a"}, applied: true, park: "p1"},
			{ev: event{Kind: Progress, Key: k, Park: "p1", By: "a", IDs: []string{"m1", "m9"}}, applied: true, park: "p1"}, // m9 was never parked
			{ev: event{Kind: Unpark, Key: k, Park: "p1", By: "a", N: 2}, applied: false, park: "p1"},                       // m2 has not run
			{ev: event{Kind: Progress, Key: k, Park: "p1", By: "a", IDs: []string{"m2"}}, applied: true, park: "p1"},
			{ev: event{Kind: Forward, Key: k, Park: "p1", IDs: []string{"m3"}}, applied: true, park: "p1"},
			{ev: event{Kind: Unpark, Key: k, Park: "p1", By: "a", N: 2}, applied: false, park: "p1"}, // m3 came meanwhile
			{ev: event{Kind: Progress, Key: k, Park: "p1", By: "a", IDs: []string{"m3"}}, applied: true, park: "p1"},
			{ev: event{Kind: Unpark, Key: k, Park: "p1", By: "a", N: 3}, applied: true},
			{ev: event{Kind: Forward, Key: k, Park: "p1", IDs: []string{"m4"}}, applied: false}, // late: runs from the subscription
			{ev: event{Kind: Park, Key: k, Park: "p1"}, applied: false},                         // an ended park never comes back
			{ev: event{Kind: Park, Key: k, Park: "p2"}, after: time.Second, applied: true, park: "p2"},
		}, func(t *testing.T, s *ctlState) {
			assert.Equal(t, map[string]string{"m1": "p1", "m2": "p1", "m3": "p1"}, s.released)
			s.prune(start.Add(releasedKeep + 2*time.Second))
			assert.Empty(t, s.released, "forgotten once they cannot come back")
			assert.Contains(t, s.ended, "p1")
			s.prune(start.Add(endedKeep + 2*time.Second))
			assert.Empty(t, s.ended)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newCtlState(testLease)
			for i, st := range tc.steps {
				v := s.apply(&st.ev, start.Add(st.after))
				assert.Equal(t, st.applied, v.Applied, "step %d: %+v", i, st.ev)
				assert.Equal(t, st.park, v.ParkID, "step %d: %+v", i, st.ev)
			}
			tc.check(t, s)
		})
	}
}

var start = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

// testLease is the release lease of the tests' states.
const testLease = 30 * time.Second

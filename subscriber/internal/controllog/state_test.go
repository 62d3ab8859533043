package controllog

import (
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
		{"release requests", []logStep{
			{ev: event{Kind: Request, Key: k, Park: "p1", By: "o1"}, applied: false}, // not parked
			{ev: event{Kind: Park, Key: k, Park: "p1"}, applied: true, park: "p1"},
			{ev: event{Kind: Forward, Key: k, Park: "p1", IDs: []string{"m1", "m2"}}, applied: true, park: "p1"},
			{ev: event{Kind: Request, Key: k, Park: "p9", By: "o1"}, applied: false, park: "p1"}, // another park
			{ev: event{Kind: Request, Key: k, Park: "p1", By: "o1", From: "ops"}, after: time.Second, applied: true, park: "p1"},
			{ev: event{Kind: Request, Key: k, Park: "p1", By: "o2", From: "other"}, after: 2 * time.Second, applied: true, park: "p1"}, // joins it
			{ev: event{Kind: Claim, Key: k, Park: "p1", By: "a"}, applied: true, park: "p1"},
			{ev: event{Kind: Stop, Key: k, Park: "p1", By: "a"}, applied: true, park: "p1"}, // a shutdown: still pending
		}, func(t *testing.T, s *ctlState) {
			want := PendingRelease{Key: k, ParkID: "p1", Requested: start.Add(time.Second), Requester: "ops"}
			assert.Equal(t, []PendingRelease{want}, s.pendingReleases())
			assert.Equal(t, start.Add(time.Second), s.list()[0].ReleaseRequested)
			assert.Equal(t, "ops", s.list()[0].ReleaseRequestedBy)

			// A released message fails for good again: the request ends.
			s.apply(&event{Kind: Claim, Key: k, Park: "p1", By: "b"}, start)
			assert.Equal(t, "b", s.pendingReleases()[0].Owner)
			s.apply(&event{Kind: Stop, Key: k, Park: "p1", By: "b", Msg: "m1", Err: "again"}, start)
			assert.Empty(t, s.pendingReleases())
			assert.Zero(t, s.record(k).Requested)
			assert.Empty(t, s.record(k).Requester)

			// Asked again, without From: the asker is the writer. The
			// release unparks the key: the request ends with the park.
			require.True(t, s.apply(&event{Kind: Request, Key: k, Park: "p1", By: "o3"}, start).Applied)
			assert.Equal(t, "o3", s.pendingReleases()[0].Requester)
			for _, ev := range []event{
				{Kind: Claim, Key: k, Park: "p1", By: "b"},
				{Kind: Progress, Key: k, Park: "p1", By: "b", IDs: []string{"m1", "m2"}},
				{Kind: Unpark, Key: k, Park: "p1", By: "b", N: 2},
			} {
				require.True(t, s.apply(&ev, start).Applied, "%+v", ev)
			}
			assert.Empty(t, s.pendingReleases())
			assert.Empty(t, s.requested)
		}},
		{"withdrawn requests", []logStep{
			{ev: event{Kind: Withdraw, Key: k, Park: "p1", By: "o1"}, applied: false}, // not parked
			{ev: event{Kind: Park, Key: k, Park: "p1"}, applied: true, park: "p1"},
			{ev: event{Kind: Withdraw, Key: k, Park: "p1", By: "o1"}, applied: false, park: "p1"}, // nothing pending
			{ev: event{Kind: Request, Key: k, Park: "p1", By: "o1", From: "ops"}, applied: true, park: "p1"},
			{ev: event{Kind: Withdraw, Key: k, Park: "p9", By: "o1"}, applied: false, park: "p1"}, // another park
			{ev: event{Kind: Withdraw, Key: k, Park: "p1", By: "o2"}, after: time.Second, applied: true, park: "p1"},
			{ev: event{Kind: Withdraw, Key: k, Park: "p1", By: "o2"}, after: time.Second, applied: false, park: "p1"}, // done already
			{ev: event{Kind: Request, Key: k, Park: "p1", By: "o1", From: "ops"}, after: 2 * time.Second, applied: true, park: "p1"},
			{ev: event{Kind: Claim, Key: k, Park: "p1", By: "a"}, after: 2 * time.Second, applied: true, park: "p1"},
			{ev: event{Kind: Withdraw, Key: k, Park: "p1", By: "o1"}, after: 2*time.Second + testLease, applied: false, park: "p1"}, // a release runs
			{ev: event{Kind: Withdraw, Key: k, Park: "p1", By: "o1"}, after: 3*time.Second + testLease, applied: true, park: "p1"},  // its claim lapsed
		}, func(t *testing.T, s *ctlState) {
			assert.Empty(t, s.pendingReleases())
			assert.Zero(t, s.record(k).Requested)
			assert.Equal(t, []Summary{{Key: k, Since: start, Releasing: true}}, s.list(), "the key stays parked")
		}},
		{"a kind from a later version", []logStep{
			{ev: event{Kind: Park, Key: k, Park: "p1"}, applied: true, park: "p1"},
			{ev: event{Kind: "compact", Key: k, Park: "p1", By: "a", IDs: []string{"m1"}}, applied: false, park: "p1"},
		}, func(t *testing.T, s *ctlState) {
			// Refused, and nothing changed: how processes of this
			// version treated Request before they knew it.
			assert.Equal(t, []Summary{{Key: k, Since: start}}, s.list())
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

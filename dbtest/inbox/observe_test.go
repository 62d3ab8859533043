package inbox_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/keyorder/keyorder/internal/metrictest"
	"github.com/keyorder/keyorder/subscriber"
	"github.com/keyorder/keyorder/subscriber/inbox"
)

// TestMetricsAndLogs: each outcome is counted by the metric, and the gap,
// the owed number applied and the copy are logged, at their levels, with
// their attributes.
func TestMetricsAndLogs(t *testing.T) {
	eachDatabase(t, func(t *testing.T, db database) {
		ctx := timeout(t, 30*time.Second)
		one, _ := db.open(t)
		meter := metrictest.NewMeter(t)
		var log metrictest.Log
		ib := newInbox(t, one, db.dialect, inbox.WithGapWait(0), inbox.WithMeterProvider(meter), inbox.WithLogger(log.Logger()))
		h := ib.Handler(record(db.dialect))
		for _, d := range []*subscriber.Delivery{delivery("k", "p", 1), delivery("k", "p", 4), delivery("k", "p", 1), delivery("k", "p", 2), {ID: "bare", Key: "k"}} {
			_ = h(ctx, d)
		}
		waiting := newInbox(t, one, db.dialect, inbox.WithMeterProvider(meter), inbox.WithLogger(log.Logger()))
		require.ErrorIs(t, waiting.Handler(record(db.dialect))(ctx, delivery("k", "p", 9)), inbox.ErrGapWait)

		got := meter.Collect(t, "keyorder.inbox.table", inbox.DefaultTable, []string{"k"})
		assert.Equal(t, map[string]float64{
			"keyorder.outcome=applied": 2, "keyorder.outcome=copy": 1, "keyorder.outcome=late": 1,
			"keyorder.outcome=refused": 1, "keyorder.outcome=gap_wait": 1,
		}, got["keyorder.inbox.messages"].Points)
		assert.Equal(t, map[string]float64{"": 2}, got["keyorder.inbox.missing"].Points, "2 and 3 owed")
		assert.Equal(t, inbox.Stats{Applied: 2, Copies: 1, Gaps: 1, Owed: 2, LateApplied: 1, Unstamped: 1}, ib.Stats())

		levels := map[string]string{}
		for _, r := range log.Records(t) {
			levels[r["msg"].(string)] = r["level"].(string)
			if r["msg"] == "keyorder/subscriber: inbox gap recorded as owed" {
				assert.Equal(t, "0.2", r["first_missing"])
				assert.Equal(t, "0.3", r["last_missing"])
				assert.Equal(t, inbox.DefaultTable, r["table"])
			}
		}
		assert.Equal(t, map[string]string{
			"keyorder/subscriber: inbox gap recorded as owed":      "WARN",
			"keyorder/subscriber: inbox applied an owed number":    "INFO",
			"keyorder/subscriber: inbox copy acked unapplied":      "DEBUG",
			"keyorder/subscriber: inbox waits for missing numbers": "INFO",
		}, levels)
	})
}

package engine

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

// TestOutcomeLabels pins the values of keyorder.outcome and
// keyorder.reason that dashboards and alerts match, parked included for
// the parking of failed keys.
func TestOutcomeLabels(t *testing.T) {
	t.Parallel()
	tests := []struct {
		out           Outcome
		label, reason string
		acks, forGood bool
	}{
		{Acked, "acked", "", true, false},
		{Deduplicated, "deduplicated", "", true, false},
		{Shutdown, "nacked", "shutdown", false, false},
		{Retried, "nacked", "retry", false, false},
		{HoldKey, "nacked", "failed", false, true},
		{Parked, "parked", "", true, true},
		{Failed, "nacked", "failed", false, true},
		{Held, "held", "hold", false, false},
		{Tail, "held", "tail", false, false},
		{Room, "nacked", "room", false, false},
		{Skipped, "acked", "replay_range", true, false},
		{DeadLettered, "dead_lettered", "failed", false, true},
	}
	for _, tt := range tests {
		t.Run(tt.label+"/"+tt.reason, func(t *testing.T) {
			assert.Equal(t, tt.label, tt.out.String())
			assert.Equal(t, tt.reason, tt.out.Reason())
			assert.Equal(t, tt.acks, tt.out.Acks())
			assert.Equal(t, tt.forGood, tt.out.ForGood())
		})
	}
}

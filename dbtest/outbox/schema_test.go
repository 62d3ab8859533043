package outbox_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/keyorder/keyorder/internal/harness"
	"github.com/keyorder/keyorder/publisher/outbox"
)

// TestEventsTableLeavesRoomForTheMark: on PostgreSQL, the events table
// New creates fills its pages to half, so that a relay's mark of an event
// (sent = sent + 1, once in its life) writes the new version in the same
// page, without an index entry (a HOT update): the mark of 2,000 events
// took 17 to 25 ms in full pages, 3 to 5 ms with the room.
func TestEventsTableLeavesRoomForTheMark(t *testing.T) {
	t.Parallel()
	for _, k := range kinds {
		if k.dialect != outbox.PostgreSQL {
			continue
		}
		ctx := harness.Context(t, testTimeout)
		db := k.open(t)
		_, err := outbox.New(ctx, db, k.dialect)
		require.NoError(t, err)
		var opts string
		require.NoError(t, db.QueryRowContext(ctx, `SELECT COALESCE(array_to_string(reloptions, ','), '') FROM pg_class
			WHERE relname = 'keyorder_outbox'`).Scan(&opts))
		assert.Equal(t, "fillfactor=50", opts)
	}
}

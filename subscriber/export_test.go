package subscriber

import (
	"time"

	"github.com/keyorder/keyorder/subscriber/internal/parking"
)

// SetReleaseLease sets how long a releaser's claim holds without a
// heartbeat, for a test that must see one lapse, and returns a function
// that restores it. The lease is part of the control log's rules, the same
// for every process, so only a test that runs alone may change it.
func SetReleaseLease(d time.Duration) (restore func()) { return parking.SetReleaseLease(d) }

// SetGapQuiet sets how long a key must have been quiet for a gap before
// its next message to be uncertain, for a test that must not wait that
// long, and returns a function that restores it. Only a test that runs
// alone may change it.
func SetGapQuiet(d time.Duration) (restore func()) {
	old := gapQuiet
	gapQuiet = d
	return func() { gapQuiet = old }
}

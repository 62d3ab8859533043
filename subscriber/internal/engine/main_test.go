package engine

import (
	"testing"

	"github.com/keyorder/keyorder/internal/leaktest"
)

// TestMain fails the run if a test leaves a goroutine of the engine
// running: a worker pool, an ack watch, a retry timer.
func TestMain(m *testing.M) { leaktest.VerifyTestMain(m) }

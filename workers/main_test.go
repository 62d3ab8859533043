package workers_test

import (
	"testing"

	"github.com/keyorder/keyorder/internal/leaktest"
)

// TestMain fails the package if any test leaves a partition goroutine (or
// any other) behind.
func TestMain(m *testing.M) {
	leaktest.VerifyTestMain(m)
}

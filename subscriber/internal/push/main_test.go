package push

import (
	"testing"

	"github.com/keyorder/keyorder/internal/leaktest"
)

func TestMain(m *testing.M) { leaktest.VerifyTestMain(m) }

package outbox_test

import (
	"testing"

	"github.com/keyorder/keyorder/dbtest/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

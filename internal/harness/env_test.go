package harness_test

import (
	"context"
	"strings"
	"testing"

	"cloud.google.com/go/pubsub/v2"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/keyorder/keyorder/internal/harness"
	"github.com/keyorder/keyorder/ordering/orderingtest"
)

// TestExampleEnvironment: every example connects the same way, to
// PUBSUB_EMULATOR_HOST when it is set, with a client of
// GOOGLE_CLOUD_PROJECT, else keyorder-test; and one that can run on its
// embedded fake only says so when the variable names another server.
func TestExampleEnvironment(t *testing.T) {
	srv := orderingtest.Start(t)
	t.Setenv(harness.EmulatorEnv, srv.Addr)
	t.Setenv(harness.ProjectEnv, "")
	assert.Equal(t, harness.Project, harness.ExampleProject())

	t.Setenv(harness.ProjectEnv, "shop")
	for _, open := range []func(context.Context) (*pubsub.Client, string, func(), error){harness.Open, harness.OpenFake} {
		c, where, closeAll, err := open(context.Background())
		require.NoError(t, err)
		assert.Equal(t, "shop", c.Project())
		assert.Equal(t, "emulator at "+srv.Addr, where)
		closeAll()
	}
	err := harness.EmbeddedOnly("examples/x", "does y")
	require.Error(t, err)
	assert.True(t, strings.Contains(err.Error(), srv.Addr) && strings.Contains(err.Error(), "unset PUBSUB_EMULATOR_HOST"), err.Error())

	t.Setenv(harness.EmulatorEnv, "")
	assert.NoError(t, harness.EmbeddedOnly("examples/x", "does y"))
}

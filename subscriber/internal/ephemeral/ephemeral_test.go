package ephemeral_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/keyorder/keyorder/subscriber/internal/ephemeral"
)

// TestName pins the names keyorder gives what it makes beside a
// subscription: processes of different versions must agree on them.
func TestName(t *testing.T) {
	t.Parallel()
	assert.Equal(t, "projects/p/topics/orders-parking-control", ephemeral.Name("projects/p/subscriptions/orders", "topics", "-parking-control"))
	assert.Equal(t, "projects/p/subscriptions/orders-release-1", ephemeral.Name("projects/p/subscriptions/orders", "subscriptions", "-release-1"))

	long := strings.Repeat("s", 250)
	got := ephemeral.Name("projects/p/subscriptions/"+long, "topics", "-parking-control")
	id := strings.TrimPrefix(got, "projects/p/topics/")
	assert.Len(t, id, 255, "the service's longest ID")
	assert.Equal(t, strings.Repeat("s", 255-len("-a5ee483b-parking-control"))+"-a5ee483b-parking-control", id, "shortened with a hash of the whole ID")
}

func TestNewID(t *testing.T) {
	t.Parallel()
	a, b := ephemeral.NewID(), ephemeral.NewID()
	assert.Len(t, a, 16)
	assert.NotEqual(t, a, b)
}

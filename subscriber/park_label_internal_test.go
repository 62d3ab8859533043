package subscriber

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

// TestParkingLabel pins the value of LabelParking, which processes of
// every version compare: the topic's ID where it fits the label rules and
// is in the subscription's project, else a hash of its full name.
func TestParkingLabel(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		project, topic string
		want           string // "" for a hash
	}{
		{"p", "projects/p/topics/orders-parked_1", "orders-parked_1"},
		{"p", "projects/p/topics/Orders", ""},
		{"p", "projects/q/topics/orders", ""},
		{"p", "projects/p/topics/orders.parked", ""},
	} {
		got := parkingLabel(tc.project, tc.topic)
		if tc.want != "" {
			assert.Equal(t, tc.want, got, tc.topic)
		} else {
			assert.Regexp(t, `^sha256-[0-9a-f]{16}$`, got, tc.topic)
		}
		assert.True(t, labelValueRE.MatchString(got), "%s fits the label rules", got)
	}
	assert.NotEqual(t, parkingLabel("p", "projects/q/topics/orders"), parkingLabel("p", "projects/r/topics/orders"), "the hash tells topics apart")
}

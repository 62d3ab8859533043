package publisher

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// TestRequestCodec checks the publisher's encoding of Publish requests
// against protobuf's: it decodes to the same request, at the size
// proto.Size gives, for requests with and without data, attributes
// (empty ones, long ones, the stamp's) and keys; a message with a field
// the publisher never sets goes through the proto codec.
func TestRequestCodec(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	str := func(n int) string { return strings.Repeat(string(rune('a'+rng.IntN(26))), n) }
	c := newRequestCodec()
	for i := range 200 {
		req := &pubsubpb.PublishRequest{Topic: "projects/p/topics/" + str(1+rng.IntN(200))}
		for range 1 + rng.IntN(20) {
			m := &pubsubpb.PubsubMessage{OrderingKey: str(rng.IntN(3) * rng.IntN(300))}
			if rng.IntN(4) > 0 {
				m.Data = []byte(str(rng.IntN(3000)))
			}
			if n := rng.IntN(5); n > 0 {
				m.Attributes = map[string]string{}
				for j := range n {
					m.Attributes[fmt.Sprint(str(rng.IntN(2)), j)] = str(rng.IntN(3) * rng.IntN(600))
				}
			}
			req.Messages = append(req.Messages, m)
		}
		out, err := c.Marshal(req)
		require.NoError(t, err)
		b := out.Materialize()
		assert.Len(t, b, proto.Size(req), "request %d", i)
		var back pubsubpb.PublishRequest
		require.NoError(t, proto.Unmarshal(b, &back))
		require.True(t, proto.Equal(req, &back), "request %d", i)
	}

	other := &pubsubpb.PublishRequest{Topic: "t", Messages: []*pubsubpb.PubsubMessage{{Data: []byte("x"), PublishTime: timestamppb.Now()}}}
	out, err := c.Marshal(other)
	require.NoError(t, err)
	var back pubsubpb.PublishRequest
	require.NoError(t, proto.Unmarshal(out.Materialize(), &back))
	assert.True(t, proto.Equal(other, &back), "a field the publisher never sets goes through protobuf")
}

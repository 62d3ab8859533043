package publisher

import (
	"strings"
	"testing"

	"cloud.google.com/go/pubsub/v2"
	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"
)

// TestMessageSizeLimitIsExact checks the 10 MB check at its edge, against
// the official client's own request size rule: a message that fits in a
// Publish request to the topic passes, one byte more fails. pstest cannot
// take messages this large (its gRPC server keeps the 4 MB default), so
// this is checked without a server.
func TestMessageSizeLimitIsExact(t *testing.T) {
	const topic = "projects/p/topics/orders"
	p := &Publisher{maxBytes: maxMessageBytes(topic)}

	// The request the official client would send for one message must
	// fit pubsub.MaxPublishRequestBytes exactly when the message is at the
	// limit.
	for _, tc := range []struct {
		key   string
		attrs map[string]string
	}{
		{"", nil},
		{"customer-1", nil},
		{"k", map[string]string{"a": strings.Repeat("v", 1024), "b": ""}},
	} {
		// Find the data length that makes the encoded message exactly
		// maxBytes long.
		enc := func(n int) int {
			return proto.Size(&pubsubpb.PubsubMessage{Data: make([]byte, n), Attributes: tc.attrs, OrderingKey: tc.key})
		}
		n := p.maxBytes - (enc(p.maxBytes) - p.maxBytes)
		for enc(n) > p.maxBytes {
			n--
		}
		for enc(n+1) <= p.maxBytes {
			n++
		}
		_, err := p.prepare(&Message{Data: make([]byte, n), Headers: tc.attrs}, tc.key)
		require.NoError(t, err, "at the limit, key %q", tc.key)
		req := &pubsubpb.PublishRequest{Topic: topic, Messages: []*pubsubpb.PubsubMessage{{Data: make([]byte, n), Attributes: tc.attrs, OrderingKey: tc.key}}}
		assert.LessOrEqual(t, proto.Size(req), int(pubsub.MaxPublishRequestBytes))

		_, err = p.prepare(&Message{Data: make([]byte, n+1), Headers: tc.attrs}, tc.key)
		require.ErrorIs(t, err, ErrMessageTooLarge, "one byte over, key %q", tc.key)
	}
}

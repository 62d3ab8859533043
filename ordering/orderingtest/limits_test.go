package orderingtest_test

import (
	"fmt"
	"strings"
	"testing"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

func attrs(n int) map[string]string {
	out := make(map[string]string, n)
	for i := range n {
		out[fmt.Sprint("a", i)] = "v"
	}
	return out
}

func msgs(n int, key string) []*pubsubpb.PubsubMessage {
	out := make([]*pubsubpb.PubsubMessage, n)
	for i := range out {
		out[i] = &pubsubpb.PubsubMessage{Data: []byte("x"), OrderingKey: key}
	}
	return out
}

// TestPublishLimits sends raw Publish requests, which the official
// publisher would split or refuse, and checks each limit of the service,
// on both sides of its boundary. A rejected request stores nothing.
func TestPublishLimits(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	big := strings.Repeat("x", 5_000_000)
	for _, tc := range []struct {
		name  string
		topic string // f.topic if empty
		msgs  []*pubsubpb.PubsubMessage
		code  codes.Code
	}{
		{name: "ordering key of 1024 bytes", msgs: msgs(1, strings.Repeat("k", 1024)), code: codes.OK},
		{name: "ordering key of 1025 bytes", msgs: msgs(1, strings.Repeat("k", 1025)), code: codes.InvalidArgument},
		{name: "two ordering keys", msgs: append(msgs(1, "a"), msgs(1, "b")...), code: codes.FailedPrecondition},
		{name: "a key and no key", msgs: append(msgs(1, "a"), msgs(1, "")...), code: codes.FailedPrecondition},
		{name: "100 attributes", msgs: []*pubsubpb.PubsubMessage{{Attributes: attrs(100)}}, code: codes.OK},
		{name: "101 attributes", msgs: []*pubsubpb.PubsubMessage{{Attributes: attrs(101)}}, code: codes.InvalidArgument},
		{name: "attribute key of 256 bytes", msgs: []*pubsubpb.PubsubMessage{{Attributes: map[string]string{strings.Repeat("a", 256): "v"}}}, code: codes.OK},
		{name: "attribute key of 257 bytes", msgs: []*pubsubpb.PubsubMessage{{Attributes: map[string]string{strings.Repeat("a", 257): "v"}}}, code: codes.InvalidArgument},
		{name: "attribute value of 1024 bytes", msgs: []*pubsubpb.PubsubMessage{{Attributes: map[string]string{"a": strings.Repeat("v", 1024)}}}, code: codes.OK},
		{name: "attribute value of 1025 bytes", msgs: []*pubsubpb.PubsubMessage{{Attributes: map[string]string{"a": strings.Repeat("v", 1025)}}}, code: codes.InvalidArgument},
		{name: "goog attribute prefix", msgs: []*pubsubpb.PubsubMessage{{Data: []byte("x"), Attributes: map[string]string{"googfoo": "v"}}}, code: codes.InvalidArgument},
		{name: "trace context of the official clients", msgs: []*pubsubpb.PubsubMessage{{Data: []byte("x"), Attributes: map[string]string{"googclient_traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}}}, code: codes.OK},
		{name: "attributes and no data", msgs: []*pubsubpb.PubsubMessage{{Attributes: map[string]string{"a": "v"}}}, code: codes.OK},
		{name: "neither data nor attributes", msgs: []*pubsubpb.PubsubMessage{{OrderingKey: "k"}}, code: codes.InvalidArgument},
		{name: "1000 messages", msgs: msgs(1000, "k"), code: codes.OK},
		{name: "1001 messages", msgs: msgs(1001, "k"), code: codes.InvalidArgument},
		{name: "no message", code: codes.InvalidArgument},
		{name: "just under 10 MB", msgs: []*pubsubpb.PubsubMessage{{Data: []byte(big)}, {Data: []byte(big[:4_999_900])}}, code: codes.OK},
		{name: "over 10 MB", msgs: []*pubsubpb.PubsubMessage{{Data: []byte(big)}, {Data: []byte(big)}}, code: codes.InvalidArgument},
		{name: "unknown topic", topic: topicName("nope"), msgs: msgs(1, ""), code: codes.NotFound},
		{name: "malformed topic", topic: "topics/nope", msgs: msgs(1, ""), code: codes.InvalidArgument},
	} {
		t.Run(tc.name, func(t *testing.T) {
			topic := tc.topic
			if topic == "" {
				topic = f.topic
			}
			before := len(f.srv.Messages(f.topic))
			res, err := f.client.TopicAdminClient.Publish(f.ctx, &pubsubpb.PublishRequest{Topic: topic, Messages: tc.msgs})
			require.Equal(t, tc.code, status.Code(err), "error: %v", err)
			stored := len(f.srv.Messages(f.topic)) - before
			if tc.code == codes.OK {
				assert.Len(t, res.MessageIds, len(tc.msgs))
				assert.Equal(t, len(tc.msgs), stored)
			} else {
				assert.Zero(t, stored, "a rejected request stores nothing")
			}
		})
	}
}

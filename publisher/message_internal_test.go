package publisher

import (
	"math"
	"strings"
	"testing"
	"unsafe"

	"cloud.google.com/go/pubsub/v2"
	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"

	"github.com/keyorder/keyorder/ordering"
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
		var out pubsubpb.PubsubMessage
		_, err := p.prepare(&Message{Data: make([]byte, n), Headers: tc.attrs}, tc.key, &out, nil)
		require.NoError(t, err, "at the limit, key %q", tc.key)
		req := &pubsubpb.PublishRequest{Topic: topic, Messages: []*pubsubpb.PubsubMessage{{Data: make([]byte, n), Attributes: tc.attrs, OrderingKey: tc.key}}}
		assert.LessOrEqual(t, proto.Size(req), int(pubsub.MaxPublishRequestBytes))

		_, err = p.prepare(&Message{Data: make([]byte, n+1), Headers: tc.attrs}, tc.key, &out, nil)
		require.ErrorIs(t, err, ErrMessageTooLarge, "one byte over, key %q", tc.key)
	}
}

// TestResultLayout pins the size of a Result, which carries its message
// as the request sends it: one allocation of 192 bytes a message, a size
// Go allocates on cache-line boundaries.
func TestResultLayout(t *testing.T) {
	var r Result
	assert.LessOrEqual(t, unsafe.Sizeof(r), uintptr(192))
}

// TestStampCountsAgainstSize checks that a stamped message's size counts
// its stamp at the stamp's largest: a keyed message that fits without the
// stamp but not with it is refused, and one that passes fits the request
// limit with any number the stamp may carry.
func TestStampCountsAgainstSize(t *testing.T) {
	const topic = "projects/p/topics/orders"
	p := &Publisher{maxBytes: maxMessageBytes(topic), stamps: newStamper("orders-api")}
	enc := func(n int, attrs map[string]string) int {
		return proto.Size(&pubsubpb.PubsubMessage{Data: make([]byte, n), Attributes: attrs, OrderingKey: "k"})
	}
	// n is the largest data length that fits without the stamp.
	n := p.maxBytes - (enc(p.maxBytes, nil) - p.maxBytes)
	for enc(n+1, nil) <= p.maxBytes {
		n++
	}
	var out pubsubpb.PubsubMessage
	_, err := p.prepare(&Message{Data: make([]byte, n)}, "k", &out, nil)
	require.ErrorIs(t, err, ErrMessageTooLarge, "fits only without the stamp")
	_, err = p.prepare(&Message{Data: make([]byte, n)}, "", &out, nil)
	require.NoError(t, err, "an unkeyed message is not stamped")

	// The largest that passes with the stamp, stamped with the largest
	// number, still fits a request.
	m := n - p.stamps.bound
	for {
		_, err := p.prepare(&Message{Data: make([]byte, m+1)}, "k", &out, nil)
		if err != nil {
			require.ErrorIs(t, err, ErrMessageTooLarge)
			break
		}
		m++
	}
	_, err = p.prepare(&Message{Data: make([]byte, m)}, "k", &out, nil)
	require.NoError(t, err)
	attrs := map[string]string{}
	ordering.Stamp{Producer: p.stamps.producer, Seq: ordering.MakeSeq(maxEpoch, math.MaxUint32)}.Put(attrs)
	req := &pubsubpb.PublishRequest{Topic: topic, Messages: []*pubsubpb.PubsubMessage{{Data: make([]byte, m), Attributes: attrs, OrderingKey: "k"}}}
	assert.LessOrEqual(t, proto.Size(req), int(pubsub.MaxPublishRequestBytes))
}

// TestSignatureCountsAgainstSize checks that a signing publisher counts
// the signature's bytes against the request limit: a keyed message that
// fits with the stamp alone is refused once the stamp is signed, and the
// largest that passes, stamped at its largest and signed, fits a request.
func TestSignatureCountsAgainstSize(t *testing.T) {
	const topic = "projects/p/topics/orders"
	plain := &Publisher{maxBytes: maxMessageBytes(topic), stamps: newStamper("orders-api")}
	signed := &Publisher{maxBytes: maxMessageBytes(topic), stamps: newStamper("orders-api")}
	require.NoError(t, signed.stamps.signWith(make([]byte, 32)))
	largest := func(p *Publisher) int {
		var out pubsubpb.PubsubMessage
		n := p.maxBytes - 2*p.stamps.bound
		for {
			if _, err := p.prepare(&Message{Data: make([]byte, n+1)}, "k", &out, nil); err != nil {
				require.ErrorIs(t, err, ErrMessageTooLarge)
				return n
			}
			n++
		}
	}
	n, m := largest(plain), largest(signed)
	assert.Equal(t, n-ordering.SignatureSize, m, "the signature costs its size")

	attrs := map[string]string{}
	st := ordering.Stamp{Producer: signed.stamps.producer, Seq: ordering.MakeSeq(maxEpoch, math.MaxUint32)}
	st.Put(attrs)
	data := make([]byte, m)
	signed.stamps.keys.Sign(attrs, "k", st, data)
	req := &pubsubpb.PublishRequest{Topic: topic, Messages: []*pubsubpb.PubsubMessage{{Data: data, Attributes: attrs, OrderingKey: "k"}}}
	assert.LessOrEqual(t, proto.Size(req), int(pubsub.MaxPublishRequestBytes))
}

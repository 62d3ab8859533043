package publisher

import (
	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"google.golang.org/grpc/encoding"
	_ "google.golang.org/grpc/encoding/proto" // registers the codec requestCodec falls back to
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
)

// requestCodec is gRPC's proto codec, but for the Publish requests the
// publisher makes, which it encodes itself: protobuf-go sizes and encodes
// a map<string, string> field by reflection, copying every key and value
// on each pass, and a message's attributes, its stamp among them, are
// most of a request's encoding. The bytes are protobuf's wire format, as
// proto.Marshal writes it but for the order of the map's entries, which
// protobuf leaves open (TestRequestCodec checks both). Responses, and any
// other message, go through the proto codec.
type requestCodec struct{ proto encoding.CodecV2 }

func newRequestCodec() requestCodec {
	return requestCodec{proto: encoding.GetCodecV2("proto")}
}

// Name is the proto codec's, so that the request's content type is.
func (requestCodec) Name() string { return "proto" }

func (c requestCodec) Unmarshal(data mem.BufferSlice, v any) error { return c.proto.Unmarshal(data, v) }

func (c requestCodec) Marshal(v any) (mem.BufferSlice, error) {
	req, ok := v.(*pubsubpb.PublishRequest)
	if !ok || !plainMessages(req.Messages) {
		return c.proto.Marshal(v)
	}
	return mem.BufferSlice{mem.SliceBuffer(appendRequest(nil, req))}, nil
}

// plainMessages reports whether msgs set only the fields the publisher
// sets: data, attributes and ordering key.
func plainMessages(msgs []*pubsubpb.PubsubMessage) bool {
	for _, m := range msgs {
		if m.MessageId != "" || m.PublishTime != nil || len(m.ProtoReflect().GetUnknown()) > 0 {
			return false
		}
	}
	return true
}

// Field numbers of PublishRequest and PubsubMessage.
const (
	fieldTopic       = 1
	fieldMessages    = 2
	fieldData        = 1
	fieldAttributes  = 2
	fieldOrderingKey = 5
	fieldMapKey      = 1
	fieldMapValue    = 2
)

// appendRequest appends the encoding of req, whose messages are plain,
// to b.
func appendRequest(b []byte, req *pubsubpb.PublishRequest) []byte {
	sizes := make([]int, len(req.Messages))
	n := 0
	if req.Topic != "" {
		n += fieldBound(len(req.Topic))
	}
	for i, m := range req.Messages {
		sizes[i] = messageSize(m)
		n += fieldBound(sizes[i])
	}
	if b == nil {
		b = make([]byte, 0, n)
	}
	if req.Topic != "" {
		b = protowire.AppendTag(b, fieldTopic, protowire.BytesType)
		b = protowire.AppendString(b, req.Topic)
	}
	for i, m := range req.Messages {
		b = protowire.AppendTag(b, fieldMessages, protowire.BytesType)
		b = protowire.AppendVarint(b, uint64(sizes[i]))
		b = appendMessage(b, m)
	}
	return b
}

// messageSize is the encoded size of the plain message m. fieldBound is
// exact for field numbers below 16.
func messageSize(m *pubsubpb.PubsubMessage) int {
	n := 0
	if len(m.Data) > 0 {
		n += fieldBound(len(m.Data))
	}
	for k, v := range m.Attributes {
		n += fieldBound(fieldBound(len(k)) + fieldBound(len(v)))
	}
	if m.OrderingKey != "" {
		n += fieldBound(len(m.OrderingKey))
	}
	return n
}

// appendMessage appends the encoding of the plain message m to b. A map
// entry carries its key and value even when empty, as protobuf-go writes
// it.
func appendMessage(b []byte, m *pubsubpb.PubsubMessage) []byte {
	if len(m.Data) > 0 {
		b = protowire.AppendTag(b, fieldData, protowire.BytesType)
		b = protowire.AppendBytes(b, m.Data)
	}
	for k, v := range m.Attributes {
		b = protowire.AppendTag(b, fieldAttributes, protowire.BytesType)
		b = protowire.AppendVarint(b, uint64(fieldBound(len(k))+fieldBound(len(v))))
		b = protowire.AppendTag(b, fieldMapKey, protowire.BytesType)
		b = protowire.AppendString(b, k)
		b = protowire.AppendTag(b, fieldMapValue, protowire.BytesType)
		b = protowire.AppendString(b, v)
	}
	if m.OrderingKey != "" {
		b = protowire.AppendTag(b, fieldOrderingKey, protowire.BytesType)
		b = protowire.AppendString(b, m.OrderingKey)
	}
	return b
}

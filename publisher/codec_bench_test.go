package publisher

import (
	"testing"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"google.golang.org/protobuf/proto"

	"github.com/keyorder/keyorder/ordering"
)

// BenchmarkStampCost measures, per message of 128 bytes with one header,
// what its stamp costs at each step, with and without it: building the
// message (Publish's prepare, and the stamp with its map of the
// message's own), encoding its request of 100 such messages with
// protobuf and with requestCodec, and decoding it, as a server in the
// process does.
func BenchmarkStampCost(b *testing.B) {
	headers := map[string]string{"kind": "order-created"}
	data := make([]byte, 128)
	for _, stamped := range []bool{false, true} {
		name := "unstamped"
		if stamped {
			name = "stamped"
		}
		p := &Publisher{maxBytes: maxMessageBytes("projects/p/topics/t")}
		if stamped {
			p.stamps = newStamper("")
		}
		q := &keyQueue{key: "customer-1"}
		b.Run("build/"+name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				var r Result
				if _, err := p.prepare(&Message{Data: data, Headers: headers}, "customer-1", &r.msg, nil); err != nil {
					b.Fatal(err)
				}
				if stamped {
					p.stamp(q, &r)
				}
			}
		})
		req := &pubsubpb.PublishRequest{Topic: "projects/p/topics/t"}
		for i := range 100 {
			attrs := map[string]string{"kind": "order-created"}
			if stamped {
				ordering.Stamp{Producer: "hhdykhhlphu4lp74gooygvqsmq", Seq: ordering.MakeSeq(1, uint32(i+1))}.Put(attrs)
			}
			req.Messages = append(req.Messages, &pubsubpb.PubsubMessage{Data: data, Attributes: attrs, OrderingKey: "customer-1"})
		}
		perMessage := func(b *testing.B) { b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*100), "ns/msg") }
		b.Run("encode-proto/"+name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := proto.Marshal(req); err != nil {
					b.Fatal(err)
				}
				_ = proto.Size(req) // gRPC's codec sizes first
			}
			perMessage(b)
		})
		c := newRequestCodec()
		b.Run("encode-keyorder/"+name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := c.Marshal(req); err != nil {
					b.Fatal(err)
				}
			}
			perMessage(b)
		})
		enc, _ := proto.Marshal(req)
		b.Run("decode/"+name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				var out pubsubpb.PublishRequest
				if err := proto.Unmarshal(enc, &out); err != nil {
					b.Fatal(err)
				}
			}
			perMessage(b)
		})
	}
}

package engine

import (
	"fmt"
	"maps"
	"testing"

	"cloud.google.com/go/pubsub/v2"

	"github.com/keyorder/keyorder/ordering"
)

// BenchmarkStampCheck measures what taking a message's stamp costs as it
// arrives (deliveryOf), side by side: taken on trust ("unsigned"), and
// verified against one key, or the second of two, as during a rotation
// ("verified", "verified-2nd"), for data of 256 bytes and of 64 KB.
func BenchmarkStampCheck(b *testing.B) {
	key := []byte("0123456789abcdef0123456789abcdef")
	old := []byte("fedcba9876543210fedcba9876543210")
	one, _ := ordering.NewStampKeys(key)
	rotating, _ := ordering.NewStampKeys(old, key)
	for _, size := range []int{256, 64 << 10} {
		data := make([]byte, size)
		st := ordering.Stamp{Producer: "producer-1#x7", Seq: ordering.MakeSeq(3, 12345)}
		attrs := map[string]string{"a": "1"}
		st.Put(attrs)
		signed := maps.Clone(attrs)
		one.Sign(signed, "customer-1", st, data)
		for _, tc := range []struct {
			name  string
			attrs map[string]string
			keys  *ordering.StampKeys
		}{
			{"unsigned", attrs, nil},
			{"verified", signed, one},
			{"verified-2nd", signed, rotating},
		} {
			b.Run(fmt.Sprintf("%s/%dB", tc.name, size), func(b *testing.B) {
				b.ReportAllocs()
				m := &pubsub.Message{ID: "1", OrderingKey: "customer-1", Data: data}
				for b.Loop() {
					m.Attributes = maps.Clone(tc.attrs) // deliveryOf takes the map over
					d, note := deliveryOf(m, tc.keys)
					if d.Seq == 0 || note.err != nil {
						b.Fatal("not verified", note.err)
					}
				}
			})
		}
	}
}

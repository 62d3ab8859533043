package ordering_test

import (
	"maps"
	"math"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"

	"github.com/keyorder/keyorder/ordering"
)

func TestStampAttributeNames(t *testing.T) {
	t.Parallel()
	names := []string{ordering.StampAttribute, ordering.ProducerAttribute, ordering.SeqAttribute}
	for i, name := range names {
		assert.False(t, strings.HasPrefix(name, "goog"), "%s: the service rejects goog attributes", name)
		assert.NotEqual(t, ordering.Header, name)
		for _, other := range names[i+1:] {
			assert.NotEqual(t, other, name)
		}
	}
}

func TestParseStamp(t *testing.T) {
	t.Parallel()
	longest := strings.Repeat("p", ordering.MaxProducerBytes)
	stamp := func(v string) map[string]string { return map[string]string{"source": "checkout", "keyorder-stamp": v} }
	old := func(producer, seq string) map[string]string {
		return map[string]string{"keyorder-producer": producer, "keyorder-seq": seq}
	}
	tests := []struct {
		name  string
		attrs map[string]string
		want  ordering.Stamp
		bad   bool
	}{
		{"nil attributes", nil, ordering.Stamp{}, false},
		{"no stamp", map[string]string{"source": "checkout"}, ordering.Stamp{}, false},

		// The one-attribute form.
		{"stamp", stamp("0.42@p-1"), ordering.Stamp{Producer: "p-1", Seq: 42}, false},
		{"epoch", stamp("3.42@p-1"), ordering.Stamp{Producer: "p-1", Seq: 3<<32 + 42}, false},
		{"first of an epoch", stamp("3.0@p-1"), ordering.Stamp{Producer: "p-1", Seq: 3 << 32}, false},
		{"largest number", stamp("4294967295.4294967295@p"), ordering.Stamp{Producer: "p", Seq: math.MaxUint64}, false},
		{"longest producer", stamp("1.7@" + longest), ordering.Stamp{Producer: longest, Seq: 1<<32 + 7}, false},
		{"multibyte producer", stamp("1.7@caisse-é"), ordering.Stamp{Producer: "caisse-é", Seq: 1<<32 + 7}, false},
		{"producer with @ and .", stamp("1.7@a@b.c"), ordering.Stamp{Producer: "a@b.c", Seq: 1<<32 + 7}, false},
		{"empty value", stamp(""), ordering.Stamp{}, true},
		{"no @", stamp("1.7"), ordering.Stamp{}, true},
		{"no dot", stamp("7@p"), ordering.Stamp{}, true},
		{"empty producer", stamp("1.7@"), ordering.Stamp{}, true},
		{"producer too long", stamp("1.7@" + longest + "p"), ordering.Stamp{}, true},
		{"producer not UTF-8", stamp("1.7@p\xff"), ordering.Stamp{}, true},
		{"zero", stamp("0.0@p"), ordering.Stamp{}, true},
		{"empty epoch", stamp(".7@p"), ordering.Stamp{}, true},
		{"empty n", stamp("1.@p"), ordering.Stamp{}, true},
		{"leading zero in epoch", stamp("01.7@p"), ordering.Stamp{}, true},
		{"leading zero in n", stamp("1.07@p"), ordering.Stamp{}, true},
		{"two dots", stamp("1.2.3@p"), ordering.Stamp{}, true},
		{"sign", stamp("+1.7@p"), ordering.Stamp{}, true},
		{"space", stamp("1.7 @p"), ordering.Stamp{}, true},
		{"epoch overflow", stamp("4294967296.1@p"), ordering.Stamp{}, true},
		{"n overflow", stamp("1.4294967296@p"), ordering.Stamp{}, true},
		{"plain decimal", stamp("42@p"), ordering.Stamp{}, true},

		// The older two-attribute form.
		{"old stamp", old("p-1", "42"), ordering.Stamp{Producer: "p-1", Seq: 42}, false},
		{"old first number", old("p-1", "1"), ordering.Stamp{Producer: "p-1", Seq: 1}, false},
		{"old largest number", old("p", "18446744073709551615"), ordering.Stamp{Producer: "p", Seq: math.MaxUint64}, false},
		{"old longest producer", old(longest, "7"), ordering.Stamp{Producer: longest, Seq: 7}, false},
		{"old multibyte producer", old("caisse-é", "7"), ordering.Stamp{Producer: "caisse-é", Seq: 7}, false},
		{"old producer alone", map[string]string{"keyorder-producer": "p-1"}, ordering.Stamp{}, true},
		{"old seq alone", map[string]string{"keyorder-seq": "3"}, ordering.Stamp{}, true},
		{"old empty producer", old("", "3"), ordering.Stamp{}, true},
		{"old producer too long", old(longest+"p", "3"), ordering.Stamp{}, true},
		{"old producer not UTF-8", old("p\xff", "3"), ordering.Stamp{}, true},
		{"old zero", old("p", "0"), ordering.Stamp{}, true},
		{"old leading zero", old("p", "07"), ordering.Stamp{}, true},
		{"old sign", old("p", "+7"), ordering.Stamp{}, true},
		{"old negative", old("p", "-7"), ordering.Stamp{}, true},
		{"old space", old("p", " 7"), ordering.Stamp{}, true},
		{"old hex", old("p", "0x7"), ordering.Stamp{}, true},
		{"old underscore", old("p", "1_000"), ordering.Stamp{}, true},
		{"old empty seq", old("p", ""), ordering.Stamp{}, true},
		{"old overflow", old("p", "18446744073709551616"), ordering.Stamp{}, true},
		{"old too many digits", old("p", "100000000000000000000"), ordering.Stamp{}, true},
		{"old epoch form", old("p", "1.7"), ordering.Stamp{}, true},

		// Both forms: which one the publisher wrote cannot be told.
		{"both forms", map[string]string{"keyorder-stamp": "0.7@p", "keyorder-producer": "p", "keyorder-seq": "7"}, ordering.Stamp{}, true},
		{"both forms, old producer only", map[string]string{"keyorder-stamp": "0.7@p", "keyorder-producer": "p"}, ordering.Stamp{}, true},
		{"both forms, old seq only", map[string]string{"keyorder-stamp": "0.7@p", "keyorder-seq": "7"}, ordering.Stamp{}, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, err := ordering.ParseStamp(tc.attrs)
			if tc.bad {
				require.ErrorIs(t, err, ordering.ErrBadStamp)
			} else {
				require.NoError(t, err)
			}
			assert.Equal(t, tc.want, got)
		})
	}
}

func TestStampValidate(t *testing.T) {
	t.Parallel()
	assert.NoError(t, ordering.Stamp{Producer: "p", Seq: 1}.Validate())
	for _, s := range []ordering.Stamp{
		{},
		{Producer: "p"},
		{Seq: 1},
		{Producer: strings.Repeat("p", ordering.MaxProducerBytes+1), Seq: 1},
		{Producer: "\xc3", Seq: 1},
	} {
		assert.ErrorIs(t, s.Validate(), ordering.ErrBadStamp, "%+v", s)
	}
}

// TestStampPutReplaces checks that Put writes the one-attribute form only,
// in place of a stamp of either form.
func TestStampPutReplaces(t *testing.T) {
	t.Parallel()
	for _, before := range []map[string]string{
		{"source": "checkout"},
		{"source": "checkout", "keyorder-stamp": "0.9@q"},
		{"source": "checkout", "keyorder-producer": "q", "keyorder-seq": "9"},
		{"source": "checkout", "keyorder-seq": "9"},
	} {
		attrs := maps.Clone(before)
		ordering.Stamp{Producer: "p-1", Seq: ordering.MakeSeq(2, 10)}.Put(attrs)
		assert.Equal(t, map[string]string{"source": "checkout", "keyorder-stamp": "2.10@p-1"}, attrs, "%v", before)
	}
}

func TestDeleteStamp(t *testing.T) {
	t.Parallel()
	for _, attrs := range []map[string]string{
		{"source": "checkout"},
		{"source": "checkout", "keyorder-stamp": "0.9@q"},
		{"source": "checkout", "keyorder-producer": "q", "keyorder-seq": "9"},
	} {
		ordering.DeleteStamp(attrs)
		assert.Equal(t, map[string]string{"source": "checkout"}, attrs)
	}
	ordering.DeleteStamp(nil) // like delete, a no-op on a nil map
}

func TestFormatSeq(t *testing.T) {
	t.Parallel()
	for seq, want := range map[uint64]string{
		1:                       "0.1",
		ordering.MakeSeq(3, 42): "3.42",
		ordering.MakeSeq(7, 0):  "7.0",
		math.MaxUint64:          "4294967295.4294967295",
	} {
		assert.Equal(t, want, ordering.FormatSeq(seq), "%d", seq)
	}
}

// TestStampSize checks Size against protobuf's own count of what the
// stamp's attribute adds to a message, since a publisher relies on it to
// stay within the request limit (P6).
func TestStampSize(t *testing.T) {
	t.Parallel()
	producers := []string{"p", "producer-7", strings.Repeat("é", 60), strings.Repeat("p", ordering.MaxProducerBytes)}
	seqs := []uint64{1, 9, 10, 127, 128, 99_999, 1 << 32, ordering.MakeSeq(12345, 678), ordering.MakeSeq(math.MaxInt32, math.MaxUint32), math.MaxUint64}
	for _, p := range producers {
		for _, seq := range seqs {
			s := ordering.Stamp{Producer: p, Seq: seq}
			base := &pubsubpb.PubsubMessage{Data: []byte("x"), OrderingKey: "k", Attributes: map[string]string{"source": "checkout"}}
			stamped := proto.Clone(base).(*pubsubpb.PubsubMessage)
			s.Put(stamped.Attributes)
			assert.Equal(t, proto.Size(stamped)-proto.Size(base), s.Size(), "%d-byte producer, seq %d", len(p), seq)
			assert.LessOrEqual(t, s.Size(), ordering.MaxStampBytes)
		}
	}
	largest := ordering.Stamp{Producer: strings.Repeat("p", ordering.MaxProducerBytes), Seq: math.MaxUint64}
	assert.Equal(t, ordering.MaxStampBytes, largest.Size())
	attrs := map[string]string{}
	largest.Put(attrs)
	assert.LessOrEqual(t, len(attrs[ordering.StampAttribute]), 1024, "the service's limit on an attribute value")
}

func TestParseStampDoesNotAllocate(t *testing.T) {
	for name, attrs := range map[string]map[string]string{
		"stamp": {ordering.StampAttribute: "7.123456@producer-7"},
		"old":   {ordering.ProducerAttribute: "producer-7", ordering.SeqAttribute: "123456"},
	} {
		allocs := testing.AllocsPerRun(100, func() {
			if _, err := ordering.ParseStamp(attrs); err != nil {
				t.Fatal(err)
			}
		})
		assert.Zero(t, allocs, name)
	}
}

// FuzzParseStamp checks that ParseStamp never panics; that what it accepts
// is valid, and written back by Put exactly as it was read when it was in
// the one-attribute form, so that one stamp has one spelling, or as the
// same stamp when it was in the older form; and that every valid stamp
// survives Put and ParseStamp.
func FuzzParseStamp(f *testing.F) {
	f.Add("3.42@producer-7", "producer-7", "42", true, false, false)
	f.Add("4294967295.4294967295@p", "p", "18446744073709551615", true, false, false)
	f.Add("4294967296.0@p", "p", "18446744073709551616", false, true, true)
	f.Add("1.07@p", "", "1", false, true, true)
	f.Add("0.1@a@b", "p", "007", false, true, true)
	f.Add("0.1@p", "p", "", true, false, true)
	f.Add("1.1@\xff", "\xff", "1", false, true, false)
	f.Fuzz(func(t *testing.T, value, producer, seq string, hasValue, hasProducer, hasSeq bool) {
		attrs := map[string]string{"other": "x"}
		if hasValue {
			attrs[ordering.StampAttribute] = value
		}
		if hasProducer {
			attrs[ordering.ProducerAttribute] = producer
		}
		if hasSeq {
			attrs[ordering.SeqAttribute] = seq
		}
		s, err := ordering.ParseStamp(attrs)
		switch {
		case err != nil:
			require.ErrorIs(t, err, ordering.ErrBadStamp)
			require.True(t, s.IsZero())
		case s.IsZero():
			require.False(t, hasValue || hasProducer || hasSeq, "attributes present but no stamp and no error")
		default:
			require.NoError(t, s.Validate())
			require.False(t, hasValue && (hasProducer || hasSeq), "both forms accepted")
			out := map[string]string{}
			s.Put(out)
			if hasValue {
				require.Equal(t, map[string]string{ordering.StampAttribute: value}, out)
			} else {
				require.Equal(t, producer, s.Producer)
				require.Equal(t, seq, strconv.FormatUint(s.Seq, 10))
			}
		}

		// Every valid stamp round-trips, in the form Put writes.
		n, perr := strconv.ParseUint(seq, 10, 64)
		in := ordering.Stamp{Producer: producer, Seq: n}
		if perr != nil || in.Validate() != nil {
			return
		}
		out := map[string]string{}
		in.Put(out)
		require.Len(t, out, ordering.StampAttributes)
		back, err := ordering.ParseStamp(out)
		require.NoError(t, err)
		require.Equal(t, in, back)
		require.LessOrEqual(t, in.Size(), ordering.MaxStampBytes)
		require.LessOrEqual(t, len(out[ordering.StampAttribute]), 1024)
		require.True(t, utf8.ValidString(out[ordering.StampAttribute]))
	})
}

func BenchmarkParseStamp(b *testing.B) {
	attrs := map[string]string{"source": "checkout", ordering.StampAttribute: "7.123456@producer-7"}
	for b.Loop() {
		_, _ = ordering.ParseStamp(attrs)
	}
}

func TestSeqEpochs(t *testing.T) {
	t.Parallel()
	tests := []struct {
		epoch, n uint32
		seq      uint64
	}{
		{0, 1, 1},
		{0, math.MaxUint32, math.MaxUint32},
		{1, 0, 1 << 32},
		{1, 1, 1<<32 + 1},
		{7, 42, 7<<32 + 42},
		{math.MaxUint32, math.MaxUint32, math.MaxUint64},
	}
	for _, tc := range tests {
		assert.Equal(t, tc.seq, ordering.MakeSeq(tc.epoch, tc.n), "MakeSeq(%d, %d)", tc.epoch, tc.n)
		e, n := ordering.SplitSeq(tc.seq)
		assert.Equal(t, [2]uint32{tc.epoch, tc.n}, [2]uint32{e, n}, "SplitSeq(%d)", tc.seq)
	}
	// Higher is newer across epochs: the last number of an epoch is below
	// the first of the next.
	assert.Less(t, ordering.MakeSeq(3, math.MaxUint32), ordering.MakeSeq(4, 1))
}

// BenchmarkStampEncoding measures what a stamp costs protobuf on the way
// of one published message: the official client sizes a message three
// times and marshals it once, and the server unmarshals it. It compares a
// message without a stamp, with the older two-attribute form, and with the
// one attribute Put writes.
func BenchmarkStampEncoding(b *testing.B) {
	stamp := ordering.Stamp{Producer: "hhdykhhlphu4lp74gooygvqsmq", Seq: ordering.MakeSeq(1, 42)}
	for _, bc := range []struct {
		name  string
		stamp func(map[string]string)
	}{
		{"unstamped", func(map[string]string) {}},
		{"two-attributes", func(attrs map[string]string) {
			attrs[ordering.ProducerAttribute] = stamp.Producer
			attrs[ordering.SeqAttribute] = strconv.FormatUint(stamp.Seq, 10)
		}},
		{"one-attribute", stamp.Put},
	} {
		b.Run(bc.name, func(b *testing.B) {
			m := &pubsubpb.PubsubMessage{Data: make([]byte, 128), OrderingKey: "customer-7", Attributes: map[string]string{"kind": "order-created"}}
			bc.stamp(m.Attributes)
			var out pubsubpb.PubsubMessage
			b.ReportAllocs()
			for b.Loop() {
				n := proto.Size(m) + proto.Size(m) + proto.Size(m)
				buf, err := proto.Marshal(m)
				if err != nil || n != 3*len(buf) {
					b.Fatal(err, n, len(buf))
				}
				if err := proto.Unmarshal(buf, &out); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

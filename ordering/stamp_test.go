package ordering_test

import (
	"math"
	"strconv"
	"strings"
	"testing"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"

	"github.com/keyorder/keyorder/ordering"
)

func TestStampAttributeNames(t *testing.T) {
	t.Parallel()
	for _, name := range []string{ordering.ProducerAttribute, ordering.SeqAttribute} {
		assert.False(t, strings.HasPrefix(name, "goog"), "%s: the service rejects goog attributes", name)
		assert.NotEqual(t, ordering.Header, name)
	}
	assert.NotEqual(t, ordering.ProducerAttribute, ordering.SeqAttribute)
}

func TestParseStamp(t *testing.T) {
	t.Parallel()
	longest := strings.Repeat("p", ordering.MaxProducerBytes)
	tests := []struct {
		name  string
		attrs map[string]string
		want  ordering.Stamp
		bad   bool
	}{
		{"nil attributes", nil, ordering.Stamp{}, false},
		{"no stamp", map[string]string{"source": "checkout"}, ordering.Stamp{}, false},
		{"stamp", map[string]string{"keyorder-producer": "p-1", "keyorder-seq": "42"}, ordering.Stamp{Producer: "p-1", Seq: 42}, false},
		{"first number", map[string]string{"keyorder-producer": "p-1", "keyorder-seq": "1"}, ordering.Stamp{Producer: "p-1", Seq: 1}, false},
		{"largest number", map[string]string{"keyorder-producer": "p", "keyorder-seq": "18446744073709551615"}, ordering.Stamp{Producer: "p", Seq: math.MaxUint64}, false},
		{"longest producer", map[string]string{"keyorder-producer": longest, "keyorder-seq": "7"}, ordering.Stamp{Producer: longest, Seq: 7}, false},
		{"multibyte producer", map[string]string{"keyorder-producer": "caisse-é", "keyorder-seq": "7"}, ordering.Stamp{Producer: "caisse-é", Seq: 7}, false},
		{"producer alone", map[string]string{"keyorder-producer": "p-1"}, ordering.Stamp{}, true},
		{"seq alone", map[string]string{"keyorder-seq": "3"}, ordering.Stamp{}, true},
		{"empty producer", map[string]string{"keyorder-producer": "", "keyorder-seq": "3"}, ordering.Stamp{}, true},
		{"producer too long", map[string]string{"keyorder-producer": longest + "p", "keyorder-seq": "3"}, ordering.Stamp{}, true},
		{"producer not UTF-8", map[string]string{"keyorder-producer": "p\xff", "keyorder-seq": "3"}, ordering.Stamp{}, true},
		{"zero", map[string]string{"keyorder-producer": "p", "keyorder-seq": "0"}, ordering.Stamp{}, true},
		{"leading zero", map[string]string{"keyorder-producer": "p", "keyorder-seq": "07"}, ordering.Stamp{}, true},
		{"sign", map[string]string{"keyorder-producer": "p", "keyorder-seq": "+7"}, ordering.Stamp{}, true},
		{"negative", map[string]string{"keyorder-producer": "p", "keyorder-seq": "-7"}, ordering.Stamp{}, true},
		{"space", map[string]string{"keyorder-producer": "p", "keyorder-seq": " 7"}, ordering.Stamp{}, true},
		{"hex", map[string]string{"keyorder-producer": "p", "keyorder-seq": "0x7"}, ordering.Stamp{}, true},
		{"underscore", map[string]string{"keyorder-producer": "p", "keyorder-seq": "1_000"}, ordering.Stamp{}, true},
		{"empty seq", map[string]string{"keyorder-producer": "p", "keyorder-seq": ""}, ordering.Stamp{}, true},
		{"overflow", map[string]string{"keyorder-producer": "p", "keyorder-seq": "18446744073709551616"}, ordering.Stamp{}, true},
		{"too many digits", map[string]string{"keyorder-producer": "p", "keyorder-seq": "100000000000000000000"}, ordering.Stamp{}, true},
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

func TestStampPutReplaces(t *testing.T) {
	t.Parallel()
	attrs := map[string]string{"source": "checkout", ordering.SeqAttribute: "9"}
	ordering.Stamp{Producer: "p-1", Seq: 10}.Put(attrs)
	assert.Equal(t, map[string]string{"source": "checkout", "keyorder-producer": "p-1", "keyorder-seq": "10"}, attrs)
}

// TestStampSize checks Size against protobuf's own count of what the two
// attributes add to a message, since a publisher relies on it to stay
// within the request limit (P6).
func TestStampSize(t *testing.T) {
	t.Parallel()
	producers := []string{"p", "producer-7", strings.Repeat("é", 60), strings.Repeat("p", ordering.MaxProducerBytes)}
	seqs := []uint64{1, 9, 10, 127, 128, 99_999, 1 << 32, math.MaxUint64}
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
}

func TestParseStampDoesNotAllocate(t *testing.T) {
	attrs := map[string]string{ordering.ProducerAttribute: "producer-7", ordering.SeqAttribute: "123456"}
	allocs := testing.AllocsPerRun(100, func() {
		if _, err := ordering.ParseStamp(attrs); err != nil {
			t.Fatal(err)
		}
	})
	assert.Zero(t, allocs)
}

// FuzzParseStamp checks that ParseStamp never panics, that what it accepts
// is valid and written back by Put exactly as it was read, so that one
// stamp has one spelling, and that every valid stamp survives Put and
// ParseStamp.
func FuzzParseStamp(f *testing.F) {
	f.Add("producer-7", "42", true, true)
	f.Add("p", "18446744073709551615", true, true)
	f.Add("p", "18446744073709551616", true, true)
	f.Add("", "1", true, true)
	f.Add("p", "007", true, true)
	f.Add("p", "", false, true)
	f.Add("\xff", "1", true, false)
	f.Fuzz(func(t *testing.T, producer, seq string, hasProducer, hasSeq bool) {
		attrs := map[string]string{"other": "x"}
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
			require.False(t, hasProducer || hasSeq, "attributes present but no stamp and no error")
		default:
			require.NoError(t, s.Validate())
			out := map[string]string{}
			s.Put(out)
			require.Equal(t, map[string]string{ordering.ProducerAttribute: producer, ordering.SeqAttribute: seq}, out)
		}

		// Every valid stamp round-trips.
		n, perr := strconv.ParseUint(seq, 10, 64)
		in := ordering.Stamp{Producer: producer, Seq: n}
		if perr != nil || in.Validate() != nil {
			return
		}
		out := map[string]string{}
		in.Put(out)
		back, err := ordering.ParseStamp(out)
		require.NoError(t, err)
		require.Equal(t, in, back)
		require.LessOrEqual(t, in.Size(), ordering.MaxStampBytes)
	})
}

func BenchmarkParseStamp(b *testing.B) {
	attrs := map[string]string{"source": "checkout", ordering.ProducerAttribute: "producer-7", ordering.SeqAttribute: "123456"}
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

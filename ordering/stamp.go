package ordering

import (
	"fmt"
	"math/bits"
	"strconv"
	"unicode/utf8"
)

// The attributes that carry a message's [Stamp]. Their names do not start
// with "goog", which the service keeps for itself (P6). The subscriber
// reads them into Delivery.Producer and Delivery.Seq and takes them out of
// the delivery's headers.
const (
	// ProducerAttribute holds the producer ID, as it is.
	ProducerAttribute = "keyorder-producer"
	// SeqAttribute holds the sequence number, in canonical decimal: no
	// sign, no leading zero, 1 to 18446744073709551615.
	SeqAttribute = "keyorder-seq"
)

// MaxProducerBytes is the longest producer ID a stamp may carry, in bytes
// of UTF-8.
const MaxProducerBytes = 128

// StampAttributes is the number of attributes a stamp adds to a message,
// to count against the service's limit of 100 (P6).
const StampAttributes = 2

// MaxStampBytes is the most a stamp adds to a message's encoded size: the
// [Stamp.Size] of a stamp with a producer ID of [MaxProducerBytes] bytes
// and the largest sequence number.
const MaxStampBytes = 191

// A Stamp says which producer published a keyed message and where it
// stands in that producer's sequence for the key. It travels as two
// attributes, [ProducerAttribute] and [SeqAttribute].
//
// A producer numbers each key's messages in publish order and never uses a
// number twice, not even for a message whose publish failed: the service
// may have stored it all the same, and a reused number would make its
// successor look like a copy of it. So two deliveries with the same stamp
// are copies of one publish (a retried request the service stored twice,
// under two message IDs), and a number skipped between two deliveries is a
// message that was never stored, or that this subscriber did not process.
//
// # Epochs
//
// A producer that cannot remember every key's last number, because keys
// come and go without end, numbers in epochs: Seq is epoch<<32 | n (see
// [MakeSeq] and [SplitSeq]). Each time it starts counting a key afresh, it
// takes a new epoch, higher than every epoch it gave before, and numbers
// the key's messages n = 1, 2, 3... within it. A key's numbers then
// increase across epochs, so "higher is newer" holds for the whole Seq,
// and none is reused. A subscriber checks the numbers within an epoch as
// above; a higher epoch starts a new run, whose first number is 1 (a
// first number above 1 is a gap within the new epoch), and the numbers
// left unused at the end of the old epoch are not a gap, since only the
// producer knew where it stopped. A lower epoch is an older message: a
// copy. keyorder's publisher keeps epochs below 2^31, so that Seq fits an
// int64 column, as it does in examples/inbox. A producer that counts from
// 1 for ever, as one that stamps by hand may, numbers in epoch 0.
//
// A producer ID names one sequence per key. Two publishers must not share
// one at the same time, and a stable ID reused after a restart must go on
// from the numbers it had reached: starting again would make the new
// messages look like copies of the old ones. keyorder's publisher stamps
// each process run as a producer of its own (see publisher.WithProducerID).
//
// The zero Stamp means "not stamped".
type Stamp struct {
	Producer string
	Seq      uint64
}

// IsZero reports whether s is the zero Stamp: no stamp.
func (s Stamp) IsZero() bool { return s == Stamp{} }

// Validate reports whether s can travel as a stamp: its producer ID is 1
// to [MaxProducerBytes] bytes of valid UTF-8 (attribute values are
// protobuf strings), and its sequence number is at least 1. The error
// matches [ErrBadStamp].
func (s Stamp) Validate() error {
	switch {
	case s.Producer == "":
		return fmt.Errorf("%w: empty producer ID", ErrBadStamp)
	case len(s.Producer) > MaxProducerBytes:
		return fmt.Errorf("%w: producer ID of %d bytes, limit %d", ErrBadStamp, len(s.Producer), MaxProducerBytes)
	case !utf8.ValidString(s.Producer):
		return fmt.Errorf("%w: producer ID %q is not valid UTF-8", ErrBadStamp, s.Producer)
	case s.Seq == 0:
		return fmt.Errorf("%w: sequence number 0; sequences start at 1", ErrBadStamp)
	}
	return nil
}

// Put writes s into attrs, as the two attributes [ProducerAttribute] and
// [SeqAttribute], replacing any that were there. It does not validate s:
// do that once, where the producer ID is chosen.
func (s Stamp) Put(attrs map[string]string) {
	attrs[ProducerAttribute] = s.Producer
	attrs[SeqAttribute] = strconv.FormatUint(s.Seq, 10)
}

// ParseStamp returns the stamp that attrs carry. A message with neither
// attribute is not stamped: ParseStamp returns the zero Stamp and nil.
// Only one of the two, a sequence number that is not canonical decimal or
// not in [1, 2^64-1], or a producer ID that [Stamp.Validate] rejects, is an
// error matching [ErrBadStamp], with the zero Stamp.
//
// It accepts exactly what [Stamp.Put] writes for a valid stamp, and does
// not allocate unless it returns an error.
func ParseStamp(attrs map[string]string) (Stamp, error) {
	producer, hasProducer := attrs[ProducerAttribute]
	seq, hasSeq := attrs[SeqAttribute]
	switch {
	case !hasProducer && !hasSeq:
		return Stamp{}, nil
	case !hasSeq:
		return Stamp{}, fmt.Errorf("%w: %s without %s", ErrBadStamp, ProducerAttribute, SeqAttribute)
	case !hasProducer:
		return Stamp{}, fmt.Errorf("%w: %s without %s", ErrBadStamp, SeqAttribute, ProducerAttribute)
	}
	n, ok := parseSeq(seq)
	if !ok {
		return Stamp{}, fmt.Errorf("%w: %s %q is not a sequence number", ErrBadStamp, SeqAttribute, truncate(seq))
	}
	s := Stamp{Producer: producer, Seq: n}
	if err := s.Validate(); err != nil {
		return Stamp{}, err
	}
	return s, nil
}

// parseSeq parses a sequence number in canonical decimal: the form
// strconv.FormatUint writes, and nothing else, so that one number has one
// spelling.
func parseSeq(s string) (uint64, bool) {
	if s == "" || len(s) > 20 || s[0] == '0' {
		return 0, false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, false
		}
	}
	n, err := strconv.ParseUint(s, 10, 64)
	return n, err == nil
}

// Size returns how many bytes s adds to the encoded message: the two
// entries of the attributes map, as protobuf encodes them. A publisher
// counts it against the request limit (P6); it is at most [MaxStampBytes]
// for a valid stamp.
func (s Stamp) Size() int {
	var digits [20]byte
	seq := strconv.AppendUint(digits[:0], s.Seq, 10)
	return mapEntrySize(len(ProducerAttribute), len(s.Producer)) + mapEntrySize(len(SeqAttribute), len(seq))
}

// mapEntrySize is the encoded size of one entry of a map<string, string>
// field numbered below 16, with a key of k bytes and a value of v bytes:
// the entry is a length-delimited field holding the key as field 1 and the
// value as field 2.
func mapEntrySize(k, v int) int {
	return fieldSize(fieldSize(k) + fieldSize(v))
}

// fieldSize is the encoded size of a length-delimited field numbered below
// 16 with n bytes of content: a one-byte tag, the length as a varint, the
// content.
func fieldSize(n int) int {
	return 1 + (bits.Len64(uint64(n)|1)+6)/7 + n
}

// MakeSeq returns the sequence number n of epoch epoch: epoch<<32 | n
// (see [Stamp], Epochs). Numbers of a higher epoch are higher than every
// number of a lower one.
func MakeSeq(epoch, n uint32) uint64 { return uint64(epoch)<<32 | uint64(n) }

// SplitSeq returns the epoch of seq and its number within the epoch, the
// inverse of [MakeSeq]. A sequence counted from 1 without epochs is in
// epoch 0.
func SplitSeq(seq uint64) (epoch, n uint32) { return uint32(seq >> 32), uint32(seq) }

// truncate shortens s for an error message.
func truncate(s string) string {
	const max = 32
	if len(s) <= max {
		return s
	}
	return s[:max] + "..."
}

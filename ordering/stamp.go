package ordering

import (
	"fmt"
	"math"
	"math/bits"
	"strconv"
	"strings"
	"unicode/utf8"
)

// StampAttribute is the attribute that carries a message's [Stamp], in
// the form [Stamp.Put] writes:
//
//	<epoch>.<n>@<producer>
//
// where epoch and n are the two halves of the sequence number (see
// [SplitSeq]), each in canonical decimal (no sign, no leading zero, "0"
// for zero), and producer is the producer ID as it is, which may itself
// contain "." or "@": the value is split at its first "@". For example,
// "3.42@orders-api#k3j..." is number 42 of epoch 3 of producer
// "orders-api#k3j...". The value is valid UTF-8 of at most 150 bytes,
// well within the service's 1024. Its name does not start with "goog",
// which the service keeps for itself (P6).
//
// One attribute costs the official client, and the service, half of what
// two did: protobuf encodes and decodes a message's attributes entry by
// entry. A subscriber reads the stamp into Delivery.Producer and
// Delivery.Seq and takes it out of the delivery's headers.
const StampAttribute = "keyorder-stamp"

// The older form of a stamp: two attributes, which keyorder wrote before
// [StampAttribute]. [ParseStamp] still reads them, so that messages
// stamped then are still checked; [Stamp.Put] no longer writes them.
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
const StampAttributes = 1

// MaxStampBytes is the most a stamp adds to a message's encoded size: the
// [Stamp.Size] of a stamp with a producer ID of [MaxProducerBytes] bytes
// and the largest sequence number.
const MaxStampBytes = 172

// maxSeqText is the length of the longest sequence number as a stamp
// spells it: "4294967295.4294967295".
const maxSeqText = 21

// A Stamp says which producer published a keyed message and where it
// stands in that producer's sequence for the key. It travels as one
// attribute, [StampAttribute].
//
// A producer numbers each key's messages in publish order and never uses a
// number twice, not even for a message whose publish failed: the service
// may have stored it all the same, and a reused number would make its
// successor look like a copy of it. So two deliveries with the same stamp
// are copies of one publish (a retried request the service stored twice,
// under two message IDs), and a number skipped between two deliveries is a
// message that was never stored, or that this subscriber did not process.
//
// An unsigned stamp is trusted as written: whoever may publish to the
// topic, or push to the endpoint, can write one, and a forged stamp of a
// producer's key at a high number makes its real messages of the key look
// like copies. A stamp signed with [StampKeys] is trusted as far as its
// signature goes: a subscriber given keys takes an unsigned or wrongly
// signed stamp for no stamp. See "Security model" in the repository's
// DESIGN.md.
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
// [FormatSeq] spells a number as a person reads it, "epoch.n".
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

// Put writes s into attrs as the one attribute [StampAttribute],
// replacing the attributes of any stamp that was there, in either form.
// It does not validate s: do that once, where the producer ID is chosen.
func (s Stamp) Put(attrs map[string]string) {
	DeleteStamp(attrs)
	var buf [maxSeqText + 1 + MaxProducerBytes]byte
	attrs[StampAttribute] = string(s.appendValue(buf[:0]))
}

// appendValue appends s as StampAttribute's value to b.
func (s Stamp) appendValue(b []byte) []byte {
	b = appendSeq(b, s.Seq)
	b = append(b, '@')
	return append(b, s.Producer...)
}

// DeleteStamp deletes from attrs the attributes that carry a stamp, in
// either form: [StampAttribute], [ProducerAttribute] and [SeqAttribute],
// and its signature, [SignatureAttribute].
// A subscriber that has read a valid stamp with [ParseStamp] uses it to
// take the stamp out of the headers it hands on.
func DeleteStamp(attrs map[string]string) {
	delete(attrs, StampAttribute)
	delete(attrs, ProducerAttribute)
	delete(attrs, SeqAttribute)
	delete(attrs, SignatureAttribute)
}

// ParseStamp returns the stamp that attrs carry, in the form
// [StampAttribute] describes, or in the older form of the two attributes
// [ProducerAttribute] and [SeqAttribute]. A message with none of the
// three is not stamped: ParseStamp returns the zero Stamp and nil.
//
// Otherwise it returns an error matching [ErrBadStamp], with the zero
// Stamp, for:
//
//   - StampAttribute together with either older attribute: a message has
//     one stamp, and which one its publisher wrote cannot be known (a
//     handler may have carried another producer's stamp into a message it
//     published), so the message counts as unstamped, and runs, rather
//     than risk being taken for a copy;
//   - a StampAttribute value that is not "<epoch>.<n>@<producer>" with
//     epoch and n in canonical decimal below 2^32;
//   - in the older form, only one of the two attributes, or a sequence
//     number that is not canonical decimal in [1, 2^64-1];
//   - a producer ID or sequence number that [Stamp.Validate] rejects.
//
// It accepts exactly what [Stamp.Put] writes for a valid stamp, and what
// keyorder wrote before, and does not allocate unless it returns an
// error.
func ParseStamp(attrs map[string]string) (Stamp, error) {
	value, hasValue := attrs[StampAttribute]
	producer, hasProducer := attrs[ProducerAttribute]
	seq, hasSeq := attrs[SeqAttribute]
	var s Stamp
	switch {
	case hasValue && (hasProducer || hasSeq):
		return Stamp{}, fmt.Errorf("%w: %s together with the older %s or %s", ErrBadStamp, StampAttribute, ProducerAttribute, SeqAttribute)
	case hasValue:
		at := strings.IndexByte(value, '@')
		if at < 0 {
			return Stamp{}, fmt.Errorf("%w: %s %q has no '@'", ErrBadStamp, StampAttribute, truncate(value))
		}
		n, ok := parseEpochSeq(value[:at])
		if !ok {
			return Stamp{}, fmt.Errorf("%w: %s %q does not start with epoch.n", ErrBadStamp, StampAttribute, truncate(value))
		}
		s = Stamp{Producer: value[at+1:], Seq: n}
	case !hasProducer && !hasSeq:
		return Stamp{}, nil
	case !hasSeq:
		return Stamp{}, fmt.Errorf("%w: %s without %s", ErrBadStamp, ProducerAttribute, SeqAttribute)
	case !hasProducer:
		return Stamp{}, fmt.Errorf("%w: %s without %s", ErrBadStamp, SeqAttribute, ProducerAttribute)
	default:
		n, ok := parseDecimal(seq, 20)
		if !ok {
			return Stamp{}, fmt.Errorf("%w: %s %q is not a sequence number", ErrBadStamp, SeqAttribute, truncate(seq))
		}
		s = Stamp{Producer: producer, Seq: n}
	}
	if err := s.Validate(); err != nil {
		return Stamp{}, err
	}
	return s, nil
}

// FormatSeq spells seq as a stamp carries it, and as a person reads it:
// its epoch and its number within the epoch, "epoch.n" (see [SplitSeq]).
// MakeSeq(3, 42) is "3.42".
func FormatSeq(seq uint64) string {
	var buf [maxSeqText]byte
	return string(appendSeq(buf[:0], seq))
}

// appendSeq appends seq to b as "epoch.n".
func appendSeq(b []byte, seq uint64) []byte {
	epoch, n := SplitSeq(seq)
	b = strconv.AppendUint(b, uint64(epoch), 10)
	b = append(b, '.')
	return strconv.AppendUint(b, uint64(n), 10)
}

// seqTextLen is len(FormatSeq(seq)), without making it.
func seqTextLen(seq uint64) int {
	epoch, n := SplitSeq(seq)
	return decimalLen(epoch) + 1 + decimalLen(n)
}

// decimalLen is the number of decimal digits of n.
func decimalLen(n uint32) int {
	d := 1
	for n >= 10 {
		n /= 10
		d++
	}
	return d
}

// parseEpochSeq parses "epoch.n", each half in canonical decimal below
// 2^32, into MakeSeq(epoch, n): the form appendSeq writes, and nothing
// else, so that one number has one spelling.
func parseEpochSeq(s string) (uint64, bool) {
	dot := strings.IndexByte(s, '.')
	if dot < 0 {
		return 0, false
	}
	epoch, ok := parseDecimal(s[:dot], 10)
	if !ok || epoch > math.MaxUint32 {
		return 0, false
	}
	n, ok := parseDecimal(s[dot+1:], 10)
	if !ok || n > math.MaxUint32 {
		return 0, false
	}
	return MakeSeq(uint32(epoch), uint32(n)), true
}

// parseDecimal parses a number of at most digits digits in canonical
// decimal: the form strconv.FormatUint writes, and nothing else ("0" but
// no other leading zero, no sign), so that one number has one spelling.
func parseDecimal(s string, digits int) (uint64, bool) {
	if s == "" || len(s) > digits || (s[0] == '0' && len(s) > 1) {
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

// Size returns how many bytes s adds to the encoded message: the entry of
// [StampAttribute] in the attributes map, as protobuf encodes it. A
// publisher counts it against the request limit (P6); it is at most
// [MaxStampBytes] for a valid stamp.
func (s Stamp) Size() int {
	return mapEntrySize(len(StampAttribute), seqTextLen(s.Seq)+1+len(s.Producer))
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

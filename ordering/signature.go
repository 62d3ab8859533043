package ordering

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"fmt"
	"hash"
	"sync"
)

// SignatureAttribute carries a stamp's signature: the first
// [SignatureBytes] of HMAC-SHA256, under a key its producer and its
// consumers share, over the message's ordering key, the stamp's producer
// and number, and the message's data, in unpadded base64url (22
// characters). [StampKeys] writes and checks it.
//
// A signed stamp cannot be moved to another message, key or number, nor
// made up, by whoever may publish to the topic without the key: a
// subscriber with keys takes a stamp whose signature is missing or wrong
// for no stamp at all. Attributes other than the stamp are not signed.
const SignatureAttribute = "keyorder-sig"

// SignatureBytes is the length of a signature before encoding: 16 bytes,
// 128 bits of HMAC-SHA256 (truncation as in RFC 2104, section 5).
const SignatureBytes = 16

// MinStampKeyBytes is the shortest key [NewStampKeys] takes: 16 bytes.
// Use 32 random bytes.
const MinStampKeyBytes = 16

// signatureText is the length of a signature as SignatureAttribute
// carries it: 22 characters of base64url for 16 bytes.
const signatureText = (SignatureBytes*8 + 5) / 6

// SignatureSize is how many bytes a signature adds to the encoded
// message: the entry of [SignatureAttribute] in its attributes map, as
// protobuf encodes it. A publisher that signs counts it against the
// request limit (P6), with one attribute more against the service's 100.
var SignatureSize = mapEntrySize(len(SignatureAttribute), signatureText)

// signatureDomain starts every signed text, so that a key shared with
// another use signs nothing that this one would accept.
const signatureDomain = "keyorder-stamp-v1\x00"

// StampKeys signs stamps with its first key and verifies them against any
// of its keys, so that a key can be rotated: consumers take the new key
// beside the old, then producers sign with the new one, then consumers
// drop the old. It is safe for concurrent use; a signature costs one
// HMAC-SHA256 over the message's data and about 80 bytes more, and no
// allocation but the attribute's value.
type StampKeys struct {
	// macs holds one pool of HMAC states per key, in the order given;
	// a state is Reset before it is put back.
	macs []*sync.Pool
}

// NewStampKeys returns the keys, in order: the first signs, each
// verifies. It refuses no key, or one shorter than [MinStampKeyBytes],
// with an error matching [ErrBadStampKey]. It copies the keys.
func NewStampKeys(keys ...[]byte) (*StampKeys, error) {
	if len(keys) == 0 {
		return nil, fmt.Errorf("%w: no key", ErrBadStampKey)
	}
	k := &StampKeys{macs: make([]*sync.Pool, len(keys))}
	for i, key := range keys {
		if len(key) < MinStampKeyBytes {
			return nil, fmt.Errorf("%w: key %d is %d bytes, at least %d", ErrBadStampKey, i, len(key), MinStampKeyBytes)
		}
		key := append([]byte(nil), key...)
		k.macs[i] = &sync.Pool{New: func() any { return &macState{mac: hmac.New(sha256.New, key)} }}
	}
	return k, nil
}

// Sign writes into attrs the signature of s, with the first key, for a
// message of ordering key orderingKey and data data, as
// [SignatureAttribute]. Sign after [Stamp.Put], which deletes a
// signature that was there. s is not checked: sign only what
// [Stamp.Validate] accepts.
func (k *StampKeys) Sign(attrs map[string]string, orderingKey string, s Stamp, data []byte) {
	sum := k.sum(0, orderingKey, s, data)
	var text [signatureText]byte
	base64.RawURLEncoding.Encode(text[:], sum[:])
	attrs[SignatureAttribute] = string(text[:])
}

// Verify reports whether attrs carry a signature of s, by any of the
// keys, for a message of ordering key orderingKey and data data. Its
// error matches [ErrUnverifiedStamp] and says whether the signature was
// missing, malformed or wrong.
func (k *StampKeys) Verify(attrs map[string]string, orderingKey string, s Stamp, data []byte) error {
	text, ok := attrs[SignatureAttribute]
	if !ok {
		return fmt.Errorf("%w: no %s", ErrUnverifiedStamp, SignatureAttribute)
	}
	var got [SignatureBytes]byte
	if len(text) != signatureText {
		return fmt.Errorf("%w: %s of %d characters, want %d", ErrUnverifiedStamp, SignatureAttribute, len(text), signatureText)
	}
	var in [signatureText]byte
	if n, err := base64.RawURLEncoding.Decode(got[:], append(in[:0], text...)); err != nil || n != SignatureBytes {
		return fmt.Errorf("%w: %s is not unpadded base64url", ErrUnverifiedStamp, SignatureAttribute)
	}
	for i := range k.macs {
		if sum := k.sum(i, orderingKey, s, data); hmac.Equal(sum[:], got[:]) {
			return nil
		}
	}
	return fmt.Errorf("%w: signature of %s for key %q matches none of %d keys", ErrUnverifiedStamp, FormatSeq(s.Seq), truncate(orderingKey), len(k.macs))
}

// macState is one HMAC state with the scratch space it writes through,
// pooled together so that a signature allocates nothing on the way.
type macState struct {
	mac hash.Hash
	buf [128]byte
	sum [sha256.Size]byte
}

// sum returns the HMAC, by key i, of the signed text: the domain, then
// the ordering key and the producer each after its length, the number in
// 8 bytes, and the data. Lengths keep one text from reading as another.
func (k *StampKeys) sum(i int, orderingKey string, s Stamp, data []byte) [SignatureBytes]byte {
	st := k.macs[i].Get().(*macState)
	b := append(st.buf[:0], signatureDomain...)
	b = binary.AppendUvarint(b, uint64(len(orderingKey)))
	st.mac.Write(b)
	st.writeString(orderingKey)
	st.mac.Write(binary.AppendUvarint(st.buf[:0], uint64(len(s.Producer))))
	st.writeString(s.Producer)
	st.mac.Write(binary.BigEndian.AppendUint64(st.buf[:0], s.Seq))
	st.mac.Write(data)
	var out [SignatureBytes]byte
	copy(out[:], st.mac.Sum(st.sum[:0]))
	st.mac.Reset()
	k.macs[i].Put(st)
	return out
}

// writeString writes s to the state's HMAC in pieces through its buffer,
// so that a string's bytes are hashed without a copy on the heap.
func (st *macState) writeString(s string) {
	for len(s) > 0 {
		n := copy(st.buf[:], s)
		st.mac.Write(st.buf[:n])
		s = s[n:]
	}
}

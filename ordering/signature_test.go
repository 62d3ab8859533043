package ordering_test

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"strings"
	"testing"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"

	"github.com/keyorder/keyorder/ordering"
)

var (
	keyA = []byte("0123456789abcdef0123456789abcdef")
	keyB = []byte("fedcba9876543210fedcba9876543210")
)

// signed returns attributes that carry s and its signature by keys.
func signed(t *testing.T, keys *ordering.StampKeys, orderingKey string, s ordering.Stamp, data []byte) map[string]string {
	t.Helper()
	attrs := map[string]string{"other": "x"}
	s.Put(attrs)
	keys.Sign(attrs, orderingKey, s, data)
	return attrs
}

func TestSignatureVerifies(t *testing.T) {
	t.Parallel()
	keys, err := ordering.NewStampKeys(keyA)
	require.NoError(t, err)
	s := ordering.Stamp{Producer: "orders-api#1", Seq: ordering.MakeSeq(3, 42)}
	attrs := signed(t, keys, "k", s, []byte("data"))
	require.NoError(t, keys.Verify(attrs, "k", s, []byte("data")))
	parsed, err := ordering.ParseStamp(attrs)
	require.NoError(t, err)
	assert.Equal(t, s, parsed, "a signature leaves the stamp readable by a subscriber without keys")
}

// TestSignatureGolden pins the signed text: a change to it would make
// every signature of the version before unverified.
func TestSignatureGolden(t *testing.T) {
	t.Parallel()
	keys, err := ordering.NewStampKeys(keyA)
	require.NoError(t, err)
	s := ordering.Stamp{Producer: "p", Seq: ordering.MakeSeq(1, 2)}
	attrs := signed(t, keys, "key", s, []byte("hello"))

	mac := hmac.New(sha256.New, keyA)
	mac.Write([]byte("keyorder-stamp-v1\x00"))
	mac.Write([]byte{3})
	mac.Write([]byte("key"))
	mac.Write([]byte{1})
	mac.Write([]byte("p"))
	mac.Write(binary.BigEndian.AppendUint64(nil, 1<<32|2))
	mac.Write([]byte("hello"))
	want := base64.RawURLEncoding.EncodeToString(mac.Sum(nil)[:16])
	assert.Equal(t, want, attrs[ordering.SignatureAttribute])
	assert.Equal(t, "XPnnamkHJOJV287Z9pa1YA", want, "the pinned vector")
}

func TestSignatureRefusesWhatItDoesNotCover(t *testing.T) {
	t.Parallel()
	keys, err := ordering.NewStampKeys(keyA)
	require.NoError(t, err)
	s := ordering.Stamp{Producer: "p", Seq: 5}
	attrs := signed(t, keys, "k", s, []byte("data"))
	cases := map[string]func() error{
		"another key":      func() error { return keys.Verify(attrs, "k2", s, []byte("data")) },
		"another number":   func() error { return keys.Verify(attrs, "k", ordering.Stamp{Producer: "p", Seq: 6}, []byte("data")) },
		"another producer": func() error { return keys.Verify(attrs, "k", ordering.Stamp{Producer: "q", Seq: 5}, []byte("data")) },
		"other data":       func() error { return keys.Verify(attrs, "k", s, []byte("datb")) },
		"a key's bytes moved to the producer": func() error {
			return keys.Verify(attrs, "", ordering.Stamp{Producer: "kp", Seq: 5}, []byte("data"))
		},
		"no signature": func() error {
			a := map[string]string{}
			s.Put(a)
			return keys.Verify(a, "k", s, []byte("data"))
		},
		"malformed": func() error {
			return keys.Verify(map[string]string{ordering.SignatureAttribute: strings.Repeat("!", 22)}, "k", s, []byte("data"))
		},
		"too short": func() error {
			return keys.Verify(map[string]string{ordering.SignatureAttribute: "abc"}, "k", s, []byte("data"))
		},
	}
	for name, verify := range cases {
		t.Run(name, func(t *testing.T) {
			assert.ErrorIs(t, verify(), ordering.ErrUnverifiedStamp)
		})
	}
	other, err := ordering.NewStampKeys(keyB)
	require.NoError(t, err)
	assert.ErrorIs(t, other.Verify(attrs, "k", s, []byte("data")), ordering.ErrUnverifiedStamp, "another key's signature")
}

// TestSignatureRotation: a subscriber that holds the new key beside the
// old verifies the producers of either.
func TestSignatureRotation(t *testing.T) {
	t.Parallel()
	oldKeys, err := ordering.NewStampKeys(keyA)
	require.NoError(t, err)
	newKeys, err := ordering.NewStampKeys(keyB)
	require.NoError(t, err)
	both, err := ordering.NewStampKeys(keyB, keyA)
	require.NoError(t, err)
	s := ordering.Stamp{Producer: "p", Seq: 1}
	assert.NoError(t, both.Verify(signed(t, oldKeys, "k", s, nil), "k", s, nil))
	assert.NoError(t, both.Verify(signed(t, newKeys, "k", s, nil), "k", s, nil))
	assert.Equal(t, signed(t, newKeys, "k", s, nil), signed(t, both, "k", s, nil), "the first key signs")
}

func TestStampKeysRefuseShortKeys(t *testing.T) {
	t.Parallel()
	_, err := ordering.NewStampKeys()
	assert.ErrorIs(t, err, ordering.ErrBadStampKey)
	_, err = ordering.NewStampKeys(keyA, keyA[:15])
	assert.ErrorIs(t, err, ordering.ErrBadStampKey)
	key := append([]byte(nil), keyA...)
	keys, err := ordering.NewStampKeys(key)
	require.NoError(t, err)
	s := ordering.Stamp{Producer: "p", Seq: 1}
	attrs := signed(t, keys, "k", s, nil)
	key[0] ^= 1
	assert.NoError(t, keys.Verify(attrs, "k", s, nil), "the keys are copied")
}

// TestPutDropsAnOldSignature: a new stamp is not covered by the
// signature of the one it replaces.
func TestPutDropsAnOldSignature(t *testing.T) {
	t.Parallel()
	keys, err := ordering.NewStampKeys(keyA)
	require.NoError(t, err)
	attrs := signed(t, keys, "k", ordering.Stamp{Producer: "p", Seq: 1}, nil)
	ordering.Stamp{Producer: "p", Seq: 2}.Put(attrs)
	assert.NotContains(t, attrs, ordering.SignatureAttribute)
	ordering.DeleteStamp(signed(t, keys, "k", ordering.Stamp{Producer: "p", Seq: 1}, nil))
}

func TestSignatureSize(t *testing.T) {
	t.Parallel()
	keys, err := ordering.NewStampKeys(keyA)
	require.NoError(t, err)
	attrs := map[string]string{}
	keys.Sign(attrs, "k", ordering.Stamp{Producer: "p", Seq: 1}, []byte("x"))
	with := proto.Size(&pubsubpb.PubsubMessage{Attributes: attrs})
	assert.Equal(t, with, ordering.SignatureSize)
	assert.False(t, strings.HasPrefix(ordering.SignatureAttribute, "goog"))
}

func BenchmarkStampSignature(b *testing.B) {
	keys, err := ordering.NewStampKeys(keyA)
	require.NoError(b, err)
	s := ordering.Stamp{Producer: "orders-api#k3j9", Seq: ordering.MakeSeq(7, 1234)}
	data := make([]byte, 256)
	b.Run("put", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			attrs := make(map[string]string, 2)
			s.Put(attrs)
		}
	})
	b.Run("put+sign", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			attrs := make(map[string]string, 2)
			s.Put(attrs)
			keys.Sign(attrs, "customer-42", s, data)
		}
	})
	attrs := map[string]string{}
	s.Put(attrs)
	keys.Sign(attrs, "customer-42", s, data)
	b.Run("parse", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := ordering.ParseStamp(attrs); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("parse+verify", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			st, err := ordering.ParseStamp(attrs)
			if err != nil {
				b.Fatal(err)
			}
			if err := keys.Verify(attrs, "customer-42", st, data); err != nil {
				b.Fatal(err)
			}
		}
	})
}

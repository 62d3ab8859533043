package publisher_test

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/keyorder/keyorder/internal/harness"
	"github.com/keyorder/keyorder/ordering"
	"github.com/keyorder/keyorder/publisher"
)

// TestWithStampKey checks that a publisher with a stamp key signs every
// stamp it writes: each keyed message verifies, with the producer, number
// and data it was stored with, under the same key and under no other; an
// unkeyed message carries no signature; and a short key is refused.
func TestWithStampKey(t *testing.T) {
	t.Parallel()
	e := newFakeEnv(t)
	ctx := testContext(t)
	key := bytes.Repeat([]byte("k"), 32)
	p := e.newPublisher(t, nil, publisher.WithStampKey(key))

	var results []*publisher.Result
	for i := range 20 {
		k := fmt.Sprintf("key-%d", i%3)
		results = append(results, p.Publish(ctx, &publisher.Message{Data: []byte(fmt.Sprint("m", i))}, publisher.WithOrderingKey(k)))
	}
	results = append(results, p.Publish(ctx, &publisher.Message{Data: []byte("unkeyed")}))
	for i, r := range results {
		_, err := r.Get(ctx)
		require.NoError(t, err, "result %d", i)
	}

	same, err := ordering.NewStampKeys(key)
	require.NoError(t, err)
	other, err := ordering.NewStampKeys(bytes.Repeat([]byte("o"), 32))
	require.NoError(t, err)
	msgs := e.srv.Messages("projects/" + harness.Project + "/topics/" + e.topic)
	require.Len(t, msgs, len(results))
	for _, m := range msgs {
		if m.OrderingKey == "" {
			assert.NotContains(t, m.Attributes, ordering.SignatureAttribute, "an unkeyed message is not stamped")
			continue
		}
		st, err := ordering.ParseStamp(m.Attributes)
		require.NoError(t, err)
		assert.Equal(t, p.Producer(), st.Producer)
		require.NoError(t, same.Verify(m.Attributes, m.OrderingKey, st, m.Data), "message %s", m.Data)
		require.ErrorIs(t, other.Verify(m.Attributes, m.OrderingKey, st, m.Data), ordering.ErrUnverifiedStamp)
		moved := st
		moved.Seq++
		require.ErrorIs(t, same.Verify(m.Attributes, m.OrderingKey, moved, m.Data), ordering.ErrUnverifiedStamp, "the signature binds the number")
	}

	_, err = publisher.New(e.client, e.topic, publisher.WithStampKey(make([]byte, ordering.MinStampKeyBytes-1)))
	require.ErrorIs(t, err, publisher.ErrInvalidConfig)
	require.ErrorIs(t, err, ordering.ErrBadStampKey)
	_, err = publisher.New(e.client, e.topic, publisher.WithStampKey(nil))
	require.ErrorIs(t, err, publisher.ErrInvalidConfig)
}

// TestSignatureCountsAgainstLimits checks that a signed stamp counts
// against P6's limits: a keyed message whose headers leave room for the
// stamp but not for its signature is refused before sending, as is one
// that sets the signature itself, while a publisher that does not sign
// takes both headers' counts.
func TestSignatureCountsAgainstLimits(t *testing.T) {
	t.Parallel()
	e := newFakeEnv(t)
	ctx := testContext(t)
	signed := e.newPublisher(t, nil, publisher.WithStampKey(bytes.Repeat([]byte("k"), 32)))
	unsigned := e.newPublisher(t, nil)

	headers := func(n int) map[string]string {
		h := make(map[string]string, n)
		for i := range n {
			h[fmt.Sprintf("h%d", i)] = "v"
		}
		return h
	}
	room := publisher.MaxAttributes - ordering.StampAttributes
	for _, tc := range []struct {
		name    string
		p       *publisher.Publisher
		headers map[string]string
		want    error
	}{
		{"room for stamp and signature", signed, headers(room - 1), nil},
		{"no room for the signature", signed, headers(room), publisher.ErrTooManyAttributes},
		{"unsigned takes it", unsigned, headers(room), nil},
		{"signature header", signed, map[string]string{ordering.SignatureAttribute: "forged"}, publisher.ErrStampAttribute},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := tc.p.Publish(ctx, &publisher.Message{Data: []byte(tc.name), Headers: tc.headers}, publisher.WithOrderingKey("k")).Get(ctx)
			if tc.want == nil {
				require.NoError(t, err)
				return
			}
			require.ErrorIs(t, err, tc.want)
		})
	}
	// Check answers for a publisher that does not sign.
	require.NoError(t, publisher.Check(&publisher.Message{Data: []byte("x"), Headers: headers(room)}, "k"))
}

package publisher_test

import (
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/keyorder/keyorder/ordering"
	"github.com/keyorder/keyorder/publisher"
)

// TestBadInput checks P6: each kind of bad input fails with its typed error,
// the server receives nothing, and the key is not paused: the next valid
// message of the same key is published.
func TestBadInput(t *testing.T) {
	t.Parallel()
	var rpcs atomic.Int64
	e := newEnv(t, onPublish(func(*pubsubpb.PublishRequest) (*pubsubpb.PublishResponse, error) {
		rpcs.Add(1)
		return nil, nil // let pstest store it
	}))
	ctx := testContext(t)
	longKey := strings.Repeat("k", ordering.MaxKeyBytes+1)
	manyAttrs := map[string]string{}
	for i := 0; i <= publisher.MaxAttributes; i++ {
		manyAttrs[fmt.Sprintf("a%d", i)] = "v"
	}
	// The partition-key header is not an attribute and does not count.
	exactlyMax := map[string]string{ordering.Header: "k"}
	for i := 0; i < publisher.MaxAttributes; i++ {
		exactlyMax[fmt.Sprintf("a%d", i)] = "v"
	}

	tests := []struct {
		name       string
		defaultKey string
		call       string
		msg        *publisher.Message
		want       error
	}{
		{"nil message", "", "k", nil, publisher.ErrNilMessage},
		{"key from option too long", "", longKey, &publisher.Message{Data: []byte("x")}, ordering.ErrKeyTooLong},
		{"key from header too long", "", "", &publisher.Message{Data: []byte("x"), Headers: map[string]string{ordering.Header: longKey}}, ordering.ErrKeyTooLong},
		{"key from option not utf8", "", "k\xff", &publisher.Message{Data: []byte("x")}, ordering.ErrKeyNotUTF8},
		{"key from header not utf8", "k", "", &publisher.Message{Data: []byte("x"), Headers: map[string]string{ordering.Header: "\xc3"}}, ordering.ErrKeyNotUTF8},
		{"too many attributes", "", "k", &publisher.Message{Headers: manyAttrs}, publisher.ErrTooManyAttributes},
		{"attribute key too long", "", "k", &publisher.Message{Headers: map[string]string{strings.Repeat("a", publisher.MaxAttributeKeyBytes+1): "v"}}, publisher.ErrAttributeKeyTooLong},
		{"attribute value too long", "", "k", &publisher.Message{Headers: map[string]string{"a": strings.Repeat("v", publisher.MaxAttributeValueBytes+1)}}, publisher.ErrAttributeValueTooLong},
		{"goog prefix", "", "k", &publisher.Message{Data: []byte("x"), Headers: map[string]string{"googclient_x": "v"}}, publisher.ErrReservedAttribute},
		{"attribute key not utf8", "", "k", &publisher.Message{Headers: map[string]string{"a\xff": "v"}}, publisher.ErrAttributeNotUTF8},
		{"attribute value not utf8", "", "k", &publisher.Message{Headers: map[string]string{"a": "\xff"}}, publisher.ErrAttributeNotUTF8},
		{"empty message", "", "k", &publisher.Message{}, publisher.ErrEmptyMessage},
		{"only the key header", "", "", &publisher.Message{Headers: map[string]string{ordering.Header: "k"}}, publisher.ErrEmptyMessage},
		{"over 10 MB", "", "k", &publisher.Message{Data: make([]byte, 10_000_000)}, publisher.ErrMessageTooLarge},
		{"over 10 MB with attributes", "", "k", &publisher.Message{Data: make([]byte, 10_000_000-1000), Headers: map[string]string{"a": strings.Repeat("v", 1000)}}, publisher.ErrMessageTooLarge},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var popts []publisher.Option
			if tt.defaultKey != "" {
				popts = append(popts, publisher.WithDefaultOrderingKey(tt.defaultKey))
			}
			p := e.newPublisher(t, popts...)
			var opts []publisher.PublishOption
			if tt.call != "" {
				opts = append(opts, publisher.WithOrderingKey(tt.call))
			}
			res := p.Publish(ctx, tt.msg, opts...)
			select {
			case <-res.Ready():
			default:
				t.Fatal("a rejected message's result must be ready at once")
			}
			_, err := res.Get(ctx)
			require.Error(t, err)
			assert.ErrorIs(t, err, tt.want)
			var ve *publisher.ValidationError
			require.True(t, errors.As(err, &ve), "%T is not a *ValidationError", err)

			// The key is not paused: its next valid message goes out.
			id, err := p.Publish(ctx, &publisher.Message{Data: []byte("ok")}, publisher.WithOrderingKey("k")).Get(ctx)
			require.NoError(t, err)
			require.NotEmpty(t, id)
		})
	}
	// One RPC per valid follow-up message, none for the bad ones.
	assert.Equal(t, int64(len(tests)), rpcs.Load())
	for _, m := range e.stored() {
		assert.Equal(t, "ok", string(m.Data))
	}
}

// TestLimitsAreInclusive checks that messages exactly at each limit pass.
func TestLimitsAreInclusive(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := testContext(t)
	// Without stamps: the caller's headers take every attribute.
	p := e.newPublisher(t, publisher.WithoutStamps())
	attrs := map[string]string{ordering.Header: strings.Repeat("k", ordering.MaxKeyBytes)}
	for i := 0; i < publisher.MaxAttributes-1; i++ {
		attrs[fmt.Sprintf("a%d", i)] = "v"
	}
	attrs[strings.Repeat("a", publisher.MaxAttributeKeyBytes)] = strings.Repeat("v", publisher.MaxAttributeValueBytes)

	id, err := p.Publish(ctx, &publisher.Message{Headers: attrs}).Get(ctx)
	require.NoError(t, err)
	m := e.srv.Message(id)
	require.NotNil(t, m)
	assert.Len(t, m.Attributes, publisher.MaxAttributes)
}

package publisher_test

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"cloud.google.com/go/pubsub/v2"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/keyorder/keyorder/internal/harness"
	"github.com/keyorder/keyorder/ordering"
	"github.com/keyorder/keyorder/publisher"
)

// TestKeyResolutionAndHeaders checks P1 and P2 on what the server stored:
// the key comes from the call, then the header, then the default, and it is
// never an attribute, while every other header is.
func TestKeyResolutionAndHeaders(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := testContext(t)
	p := e.newPublisher(t, publisher.WithDefaultOrderingKey("default-key"))

	tests := []struct {
		name    string
		call    string
		headers map[string]string
		wantKey string
	}{
		{"call option wins", "call-key", map[string]string{ordering.Header: "header-key", "a": "1"}, "call-key"},
		{"header over default", "", map[string]string{ordering.Header: "header-key", "a": "2"}, "header-key"},
		{"default last", "", map[string]string{"a": "3"}, "default-key"},
		{"empty header falls through", "", map[string]string{ordering.Header: "", "a": "4"}, "default-key"},
	}
	for _, tt := range tests {
		var opts []publisher.PublishOption
		if tt.call != "" {
			opts = append(opts, publisher.WithOrderingKey(tt.call))
		}
		id, err := p.Publish(ctx, &publisher.Message{Data: []byte(tt.name), Headers: tt.headers}, opts...).Get(ctx)
		require.NoError(t, err, tt.name)

		m := e.srv.Message(id)
		require.NotNil(t, m, tt.name)
		assert.Equal(t, tt.wantKey, m.OrderingKey, tt.name)
		assert.NotContains(t, m.Attributes, ordering.Header, tt.name)
		// The headers travel as attributes, with the stamp (S12).
		want := map[string]string{}
		for k, v := range tt.headers {
			if k != ordering.Header {
				want[k] = v
			}
		}
		st, err := ordering.ParseStamp(m.Attributes)
		require.NoError(t, err, tt.name)
		assert.Equal(t, p.Producer(), st.Producer, tt.name)
		st.Put(want)
		assert.Equal(t, want, m.Attributes, tt.name)
		// The caller's map is left as it was.
		if v, ok := tt.headers[ordering.Header]; ok {
			assert.Equal(t, v, tt.headers[ordering.Header])
		}
	}
}

// TestNoKeyIsUnordered checks that a publisher with no default sends
// messages without a key as unordered.
func TestNoKeyIsUnordered(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := testContext(t)
	p := e.newPublisher(t)

	id, err := p.Publish(ctx, &publisher.Message{Data: []byte("x"), Headers: map[string]string{"h": "v"}}).Get(ctx)
	require.NoError(t, err)
	m := e.srv.Message(id)
	require.NotNil(t, m)
	assert.Empty(t, m.OrderingKey)
	assert.Equal(t, map[string]string{"h": "v"}, m.Attributes)
}

// TestOrderPerKey publishes interleaved keys from one goroutine per key and
// checks the server holds each key's messages in Publish order (P3).
func TestOrderPerKey(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := testContext(t)
	p := e.newPublisher(t, publisher.WithPublishSettings(settings(3)))

	const keys, perKey = 8, 40
	errs := make(chan error, keys)
	for k := 0; k < keys; k++ {
		go func() {
			key := fmt.Sprintf("k%d", k)
			var results []*publisher.Result
			for i := 0; i < perKey; i++ {
				results = append(results, p.Publish(ctx, &publisher.Message{Data: []byte(fmt.Sprint(i))}, publisher.WithOrderingKey(key)))
			}
			for _, r := range results {
				if _, err := r.Get(ctx); err != nil {
					errs <- err
					return
				}
			}
			errs <- nil
		}()
	}
	for k := 0; k < keys; k++ {
		require.NoError(t, <-errs)
	}
	names := keyNames(keys, "k%d")
	report := e.storedOrder(names, perKey, func(data string) int {
		i, _ := strconv.Atoi(data)
		return i + 1
	})
	require.NoError(t, report.Err())
	assert.Equal(t, keys*perKey, report.Records)
}

// TestNewRejectsBadConfiguration checks that every invalid argument or
// option of New matches ErrInvalidConfig, and the rule it breaks where
// there is one.
func TestNewRejectsBadConfiguration(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	with := func(edit func(*pubsub.PublishSettings)) []publisher.Option {
		s := pubsub.DefaultPublishSettings
		edit(&s)
		return []publisher.Option{publisher.WithPublishSettings(s)}
	}

	tests := []struct {
		name   string
		client *pubsub.Client
		topic  string
		opts   []publisher.Option
		is     error // besides ErrInvalidConfig
	}{
		{"nil client", nil, "topic", nil, nil},
		{"empty topic", e.client, "", nil, nil},
		{"short topic", e.client, "t", nil, nil},
		{"topic starting with a digit", e.client, "1topic", nil, nil},
		{"topic with a space", e.client, "my topic", nil, nil},
		{"goog topic", e.client, "goog-topic", nil, nil},
		{"full name of a subscription", e.client, "projects/p/subscriptions/topic", nil, nil},
		{"full name without project", e.client, "projects//topics/topic", nil, nil},
		{"nil option", e.client, "topic", []publisher.Option{publisher.WithoutStamps(), nil}, nil},
		{"default key too long", e.client, "topic", []publisher.Option{publisher.WithDefaultOrderingKey(string(make([]byte, 1025)))}, ordering.ErrKeyTooLong},
		{"default key not utf8", e.client, "topic", []publisher.Option{publisher.WithDefaultOrderingKey("\xff")}, ordering.ErrKeyNotUTF8},
		{"hedging", e.client, "topic", with(func(s *pubsub.PublishSettings) { s.HedgingSettings = &pubsub.HedgingSettings{} }), nil},
		{"negative count threshold", e.client, "topic", with(func(s *pubsub.PublishSettings) { s.CountThreshold = -1 }), nil},
		{"negative byte threshold", e.client, "topic", with(func(s *pubsub.PublishSettings) { s.ByteThreshold = -1 }), nil},
		{"negative delay threshold", e.client, "topic", with(func(s *pubsub.PublishSettings) { s.DelayThreshold = -time.Millisecond }), nil},
		{"negative timeout", e.client, "topic", with(func(s *pubsub.PublishSettings) { s.Timeout = -time.Second }), nil},
		{"negative goroutines", e.client, "topic", with(func(s *pubsub.PublishSettings) { s.NumGoroutines = -1 }), nil},
		{"unknown flow control behavior", e.client, "topic", with(func(s *pubsub.PublishSettings) { s.FlowControlSettings.LimitExceededBehavior = 7 }), nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			p, err := publisher.New(tt.client, tt.topic, tt.opts...)
			require.ErrorIs(t, err, publisher.ErrInvalidConfig)
			assert.Nil(t, p)
			assert.True(t, strings.HasPrefix(err.Error(), "keyorder/publisher: invalid configuration: "), err.Error())
			if tt.is != nil {
				assert.ErrorIs(t, err, tt.is)
			}
		})
	}
}

// TestNewTakesFullTopicName checks that New takes a topic's full name as
// well as its ID, and publishes to that topic.
func TestNewTakesFullTopicName(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := testContext(t)
	p, err := publisher.New(e.client, "projects/"+harness.Project+"/topics/"+e.topic)
	require.NoError(t, err)
	defer func() { require.NoError(t, p.Close(ctx)) }()
	_, err = p.Publish(ctx, &publisher.Message{Data: []byte("full name")}, publisher.WithOrderingKey("k")).Get(ctx)
	require.NoError(t, err)
	assert.Equal(t, []string{"full name"}, e.storedData("k"))
}

package push

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/keyorder/keyorder/ordering/orderingtest"
)

// lenientEnvelope is a push envelope as encoding/json reads it, taking the
// last of a field given twice and folding case: how the endpoint read
// envelopes before, and how most endpoints do.
type lenientEnvelope struct {
	Message struct {
		Attributes   map[string]string `json:"attributes"`
		Data         []byte            `json:"data"`
		MessageID    string            `json:"messageId"`
		MessageIDAlt string            `json:"message_id"`
		OrderingKey  string            `json:"orderingKey"`
	} `json:"message"`
	Subscription    string `json:"subscription"`
	DeliveryAttempt int    `json:"deliveryAttempt"`
}

// FuzzDecodeEnvelope: decodeEnvelope never panics, and whatever it
// accepts, encoding/json reads alike: the strict reading only refuses,
// never reads another message.
func FuzzDecodeEnvelope(f *testing.F) {
	for _, seed := range []string{
		`{"message":{"data":"eA==","messageId":"1","message_id":"1","orderingKey":"k","attributes":{"a":"b"}},"subscription":"s"}`,
		`{"subscription":"s","subscription":"t","message":{}}`,
		`{"Subscription":"s","message":{"messageID":"1"}}`,
		`{"message":{"attributes":{"a":"1","a":"2"}}}`,
		`{"message":{"data":null,"publishTime":"2026-01-01T00:00:00Z"},"deliveryAttempt":3}`,
		`{"\u017fubscription":"s"} {}`,
		`[1,2]`, `{"message":[]}`, `{"message":{"attributes":{"a":1}}}`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		env, err := decodeEnvelope(bytes.NewReader(body))
		if err != nil {
			return
		}
		var lenient lenientEnvelope
		require.NoError(t, json.Unmarshal(body, &lenient), "accepted, but encoding/json refuses it")
		lm := lenient.Message
		assert.Equal(t, lenient.Subscription, env.subscription)
		assert.Equal(t, lm.MessageID, env.id)
		assert.Equal(t, lm.MessageIDAlt, env.idAlt)
		assert.Equal(t, lm.OrderingKey, env.key)
		assert.Equal(t, lenient.DeliveryAttempt, env.attempt)
		assert.True(t, bytes.Equal(lm.Data, env.data), "data")
		if len(lm.Attributes) > 0 || len(env.attrs) > 0 {
			assert.Equal(t, lm.Attributes, env.attrs)
		}
	})
}

// envelopeOf returns a push envelope with size bytes of data.
func envelopeOf(size int) []byte {
	body, err := json.Marshal(map[string]any{
		"message": map[string]any{
			"data": bytes.Repeat([]byte("x"), size), "messageId": "2070443601311540", "message_id": "2070443601311540",
			"publishTime": "2026-02-26T19:13:55.749Z", "publish_time": "2026-02-26T19:13:55.749Z", "orderingKey": "customer-42",
			"attributes": map[string]string{"keyorder-stamp": "3.42@orders-api#k3j", "colour": "red"},
		},
		"subscription": "projects/p/subscriptions/s",
	})
	if err != nil {
		panic(err)
	}
	return body
}

// BenchmarkPushDecode: the strict, streaming reading of an envelope beside
// reading the whole body and encoding/json's Unmarshal of it, as the
// endpoint read it before and as most endpoints do.
func BenchmarkPushDecode(b *testing.B) {
	for _, size := range []int{1 << 10, 1 << 20} {
		body := envelopeOf(size)
		b.Run(sizeName(size)+"/strict", func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(body)))
			for b.Loop() {
				if _, err := decodeEnvelope(bytes.NewReader(body)); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(sizeName(size)+"/unmarshal", func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(body)))
			for b.Loop() {
				all, err := io.ReadAll(io.LimitReader(bytes.NewReader(body), maxPushBody+1))
				var env lenientEnvelope
				if err == nil {
					err = json.Unmarshal(all, &env)
				}
				if err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func sizeName(n int) string {
	if n >= 1<<20 {
		return "1MB"
	}
	return "1KB"
}

// BenchmarkPushToken: the endpoint's whole token check (header, key ID,
// validation, times, claims) beside idtoken's Validate alone, which is
// what an endpoint that calls idtoken directly pays.
func BenchmarkPushToken(b *testing.B) {
	srv, err := orderingtest.New()
	require.NoError(b, err)
	defer srv.Close()
	const email, aud = "pusher@p.iam.gserviceaccount.com", "https://push.example/push"
	v, err := srv.TokenValidator(b.Context())
	require.NoError(b, err)
	token, err := srv.SignToken(srv.PushClaims(email, aud))
	require.NoError(b, err)
	req := httptest.NewRequest(http.MethodPost, aud, nil)
	req.Header.Set("Authorization", "Bearer "+token)
	b.Run("check", func(b *testing.B) {
		b.ReportAllocs()
		c := newTokenChecker(v)
		for b.Loop() {
			if code, err := c.check(req, email, aud); err != nil {
				b.Fatal(code, err)
			}
		}
	})
	b.Run("idtoken", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := v.Validate(req.Context(), token, aud); err != nil {
				b.Fatal(err)
			}
		}
	})
}

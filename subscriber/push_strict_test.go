package subscriber_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/api/idtoken"

	"github.com/keyorder/keyorder/internal/harness"
	"github.com/keyorder/keyorder/internal/metrictest"
	"github.com/keyorder/keyorder/ordering"
	"github.com/keyorder/keyorder/publisher"
	"github.com/keyorder/keyorder/subscriber"
)

// After authentication, the endpoint still refuses what the service never
// sends, with 400, before anything of it is kept.

// envelope is a push envelope written by hand, each field in order, so
// that a field may come twice or in other letter case.
func envelope(fields ...string) []byte {
	return []byte("{" + strings.Join(fields, ",") + "}")
}

func field(name string, v any) string { return fmt.Sprintf("%q:%s", name, mustJSON(v)) }

func attrsOf(n int, prefix string) map[string]string {
	m := map[string]string{}
	for i := range n {
		m[fmt.Sprintf("%s%d", prefix, i)] = "v"
	}
	return m
}

// TestPushRefusesWhatTheServiceNeverSends: ambiguous envelopes, message
// IDs over 64 bytes, keys that fail ordering.Validate and attributes over
// P6's limits are refused with 400 and run nothing; each limit is taken at
// its edge, which runs, and one past it.
func TestPushRefusesWhatTheServiceNeverSends(t *testing.T) {
	t.Parallel()
	e := newAttackEnv(t)
	token := e.g.pushToken(e.endpoint, nil)
	sub := field("subscription", e.sub.Name())
	msg := func(id string, extra ...string) string {
		return `"message":{` + strings.Join(append([]string{field("messageId", id), field("data", []byte("x"))}, extra...), ",") + "}"
	}
	withAttrs := func(id string, attrs map[string]string) []byte {
		return envelope(sub, msg(id, field("attributes", attrs)))
	}
	long := func(n int) string { return strings.Repeat("7", n) }
	for _, tc := range []struct {
		name string
		body []byte
		want int
	}{
		{"subscription twice", envelope(field("subscription", "projects/p/subscriptions/other"), sub, msg("m-1")), http.StatusBadRequest},
		{"subscription twice, ours first", envelope(sub, field("subscription", "projects/p/subscriptions/other"), msg("m-2")), http.StatusBadRequest},
		{"message twice", envelope(sub, msg("m-3"), msg("m-4")), http.StatusBadRequest},
		{"Subscription", envelope(field("Subscription", e.sub.Name()), msg("m-5")), http.StatusBadRequest},
		{"MESSAGE", envelope(sub, strings.Replace(msg("m-6"), `"message"`, `"MESSAGE"`, 1)), http.StatusBadRequest},
		{"messageID", envelope(sub, `"message":{`+field("messageID", "m-7")+`}`), http.StatusBadRequest},
		{"messageId twice", envelope(sub, msg("m-8", field("messageId", "m-9"))), http.StatusBadRequest},
		{"messageId and message_id differ", envelope(sub, msg("m-10", field("message_id", "m-11"))), http.StatusBadRequest},
		{"publishTime and publish_time differ", envelope(sub, msg("m-12", field("publishTime", "2026-01-01T00:00:00Z"), field("publish_time", "2026-01-02T00:00:00Z"))), http.StatusBadRequest},
		{"an attribute twice", envelope(sub, msg("m-13", `"attributes":{"a":"1","a":"2"}`)), http.StatusBadRequest},
		{"an attribute not a string", envelope(sub, msg("m-14", `"attributes":{"a":1}`)), http.StatusBadRequest},
		{"subscription with a long s", envelope(`"\u017fubscription":"projects/p/subscriptions/other"`, sub, msg("m-15")), http.StatusBadRequest},
		{"orderingKey in folded case", envelope(sub, msg("m-16", field("orderingkey", "k"))), http.StatusBadRequest},
		{"data after the envelope", append(envelope(sub, msg("m-17")), []byte(`{}`)...), http.StatusBadRequest},
		{"not an object", []byte(`["message"]`), http.StatusBadRequest},
		{"an unknown field", envelope(sub, msg("m-18"), field("extra", map[string]int{"a": 1})), http.StatusNoContent},
		{"ID of 64 bytes", envelope(sub, msg(long(64))), http.StatusNoContent},
		{"ID of 65 bytes", envelope(sub, msg(long(65))), http.StatusBadRequest},
		{"ID of 1 MB", envelope(sub, msg(long(1<<20))), http.StatusBadRequest},
		{"key of 1024 bytes", envelope(sub, msg("m-19", field("orderingKey", strings.Repeat("k", ordering.MaxKeyBytes)))), http.StatusNoContent},
		{"key of 1025 bytes", envelope(sub, msg("m-20", field("orderingKey", strings.Repeat("k", ordering.MaxKeyBytes+1)))), http.StatusBadRequest},
		{"key of 1 MB", envelope(sub, msg("m-21", field("orderingKey", strings.Repeat("k", 1<<20)))), http.StatusBadRequest},
		{"100 attributes", withAttrs("m-22", attrsOf(publisher.MaxAttributes, "a")), http.StatusNoContent},
		{"100 attributes and the service's own", withAttrs("m-23", merge(attrsOf(publisher.MaxAttributes, "a"), attrsOf(3, "googclient_"))), http.StatusNoContent},
		{"101 attributes", withAttrs("m-24", attrsOf(publisher.MaxAttributes+1, "a")), http.StatusBadRequest},
		{"10,000 attributes", withAttrs("m-25", attrsOf(10_000, "a")), http.StatusBadRequest},
		{"attribute name of 256 bytes", withAttrs("m-26", map[string]string{strings.Repeat("n", 256): "v"}), http.StatusNoContent},
		{"attribute name of 257 bytes", withAttrs("m-27", map[string]string{strings.Repeat("n", 257): "v"}), http.StatusBadRequest},
		{"attribute value of 1024 bytes", withAttrs("m-28", map[string]string{"a": strings.Repeat("v", 1024)}), http.StatusNoContent},
		{"attribute value of 1025 bytes", withAttrs("m-29", map[string]string{"a": strings.Repeat("v", 1025)}), http.StatusBadRequest},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, e.post(t, http.MethodPost, token, tc.body))
		})
	}
	assert.EqualValues(t, 7, e.calls.Load(), "the accepted ones ran")
}

func merge(a, b map[string]string) map[string]string {
	for k, v := range b {
		a[k] = v
	}
	return a
}

// unwrappedEnv is the faithful fake with an ordered push subscription that
// sends payloads unwrapped, with write_metadata, to an endpoint served by
// its PushHandler; the handler hands each Delivery to got.
type unwrappedEnv struct {
	pushEnv
	got chan *subscriber.Delivery
}

func newUnwrappedEnv(t *testing.T) unwrappedEnv {
	t.Helper()
	srv, client := harness.Fake(t)
	mux := http.NewServeMux()
	web := httptest.NewServer(mux)
	t.Cleanup(web.Close)
	topic, subID := names()
	endpoint := web.URL + "/push"
	createDirectly(t, client, &pubsubpb.Subscription{
		Name: path(client, "subscriptions", subID), Topic: path(client, "topics", topic), EnableMessageOrdering: true,
		PushConfig: &pubsubpb.PushConfig{
			PushEndpoint: endpoint,
			Wrapper:      &pubsubpb.PushConfig_NoWrapper_{NoWrapper: &pubsubpb.PushConfig_NoWrapper{WriteMetadata: true}},
			AuthenticationMethod: &pubsubpb.PushConfig_OidcToken_{OidcToken: &pubsubpb.PushConfig_OidcToken{
				ServiceAccountEmail: pusher,
			}},
		},
	})
	validator, err := srv.TokenValidator(testContext(t))
	require.NoError(t, err)
	s, err := subscriber.Open(testContext(t), client, subID, subscriber.WithTokenValidator(validator), fast)
	require.NoError(t, err)
	got := make(chan *subscriber.Delivery, 16)
	mux.Handle("/push", s.PushHandler(func(_ context.Context, d *subscriber.Delivery) error {
		got <- d
		return nil
	}))
	t.Cleanup(func() { require.NoError(t, s.Close(context.Background())) })
	return unwrappedEnv{
		pushEnv: pushEnv{fakeEnv: fakeEnv{srv: srv, client: client, topic: s.Topic(), sub: s}, web: web, endpoint: endpoint, mux: mux},
		got:     got,
	}
}

// TestPushUnwrapped: an unwrapped push with metadata runs with the
// message's own attributes, and none of the headers that a proxy or a
// browser adds; a request without the subscription's header, or with a
// header the service sends once twice, or a key, ID or attribute the
// service would not send, is refused with 400. The service's own tokens
// pass the key check, with the fake's validator too.
func TestPushUnwrapped(t *testing.T) {
	t.Parallel()
	e := newUnwrappedEnv(t)
	p, err := publisher.New(e.client, e.topic)
	require.NoError(t, err)
	_, err = p.Publish(testContext(t), &publisher.Message{Data: []byte("k/1"), Headers: map[string]string{"colour": "red"}},
		publisher.WithOrderingKey("k")).Get(testContext(t))
	require.NoError(t, err)
	require.NoError(t, p.Close(testContext(t)))
	d := <-e.got
	assert.Equal(t, "k/1", string(d.Data))
	assert.Equal(t, map[string]string{"colour": "red", ordering.Header: "k"}, d.Headers)

	token, err := e.srv.SignToken(e.srv.PushClaims(pusher, e.endpoint))
	require.NoError(t, err)
	send := func(change func(h http.Header)) int {
		req, err := http.NewRequestWithContext(testContext(t), http.MethodPost, e.endpoint, strings.NewReader("data"))
		require.NoError(t, err)
		h := req.Header
		h.Set("Authorization", "Bearer "+token)
		h.Set("X-Goog-Pubsub-Subscription-Name", e.sub.Name())
		h.Set("X-Goog-Pubsub-Message-Id", fmt.Sprintf("m-%d", time.Now().UnixNano()))
		h.Set("X-Goog-Pubsub-Publish-Time", "2026-01-01T00:00:00.000Z")
		h.Set("X-Goog-Pubsub-Ordering-Key", "k2")
		change(h)
		res, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		_ = res.Body.Close()
		return res.StatusCode
	}
	assert.Equal(t, http.StatusNoContent, send(func(h http.Header) {
		h.Set("Colour", "blue")
		for _, k := range []string{"Cookie", "Origin", "Referer", "X-Real-Ip", "X-Forwarded-For", "Sec-Fetch-Mode", "Accept-Language", "True-Client-Ip", "X-Request-Id", "Forwarded"} {
			h.Set(k, "from-a-proxy")
		}
	}))
	d = <-e.got
	assert.Equal(t, map[string]string{"colour": "blue", ordering.Header: "k2"}, d.Headers, "only the message's attributes")
	for _, tc := range []struct {
		name   string
		change func(h http.Header)
	}{
		{"no subscription header", func(h http.Header) { h.Del("X-Goog-Pubsub-Subscription-Name") }},
		{"another subscription", func(h http.Header) { h.Set("X-Goog-Pubsub-Subscription-Name", "projects/p/subscriptions/other") }},
		{"two subscription headers", func(h http.Header) { h.Add("X-Goog-Pubsub-Subscription-Name", "projects/p/subscriptions/other") }},
		{"two message IDs", func(h http.Header) { h.Add("X-Goog-Pubsub-Message-Id", "m-other") }},
		{"an ID of 65 bytes", func(h http.Header) { h.Set("X-Goog-Pubsub-Message-Id", strings.Repeat("7", 65)) }},
		{"a key not UTF-8", func(h http.Header) { h.Set("X-Goog-Pubsub-Ordering-Key", "k\xff") }},
		{"a key of 1025 bytes", func(h http.Header) { h.Set("X-Goog-Pubsub-Ordering-Key", strings.Repeat("k", 1025)) }},
		{"an attribute not UTF-8", func(h http.Header) { h.Set("Colour", "r\xffd") }},
		{"an attribute twice", func(h http.Header) { h.Add("Colour", "red"); h.Add("Colour", "blue") }},
		{"an attribute of 1025 bytes", func(h http.Header) { h.Set("Colour", strings.Repeat("r", 1025)) }},
		{"two delivery attempts", func(h http.Header) {
			h.Add("X-Goog-Pubsub-Delivery-Attempt", "1")
			h.Add("X-Goog-Pubsub-Delivery-Attempt", "2")
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, http.StatusBadRequest, send(tc.change))
		})
	}
	select {
	case d := <-e.got:
		t.Fatalf("a refused request ran: %+v", d)
	default:
	}
}

// TestWithStrictPushAuth: with WithStrictPushAuth, Open refuses a push
// subscription whose account or audience differs from WithPushAuth's;
// without it, the difference is logged and the subscription's own are
// checked. It needs WithPushAuth.
func TestWithStrictPushAuth(t *testing.T) {
	t.Parallel()
	e := newPushSub(t)
	ctx := testContext(t)
	strict := subscriber.WithStrictPushAuth()
	for _, tc := range []struct {
		name string
		opts []subscriber.Option
		err  bool
	}{
		{"the same", []subscriber.Option{subscriber.WithPushAuth(pusher, ""), strict}, false},
		{"the same, the audience named", []subscriber.Option{subscriber.WithPushAuth(pusher, e.endpoint), strict}, false},
		{"another account", []subscriber.Option{subscriber.WithPushAuth("other@example.com", ""), strict}, true},
		{"another audience", []subscriber.Option{subscriber.WithPushAuth(pusher, "https://elsewhere.example/push"), strict}, true},
		{"another endpoint, so another audience", []subscriber.Option{subscriber.WithPush("https://elsewhere.example/push"), subscriber.WithPushAuth(pusher, ""), strict}, true},
		{"strict without WithPushAuth", []subscriber.Option{strict}, true},
		{"another account, not strict", []subscriber.Option{subscriber.WithPushAuth("other@example.com", "")}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var logs metrictest.Log
			_, err := subscriber.Open(ctx, e.client, e.sub.Name(), append(tc.opts, subscriber.WithLogger(logs.Logger()))...)
			if tc.err {
				require.ErrorIs(t, err, subscriber.ErrInvalidConfig)
				return
			}
			require.NoError(t, err)
		})
	}
}

// TestPushLogsNoSecret: the endpoint logged for a push subscription
// without a token leaves out its user information and query, where a
// secret may be.
func TestPushLogsNoSecret(t *testing.T) {
	t.Parallel()
	_, client := harness.Fake(t)
	var logs metrictest.Log
	topic, subID := names()
	s, err := subscriber.CreateWithTopic(testContext(t), client, topic, subID,
		subscriber.WithPush("https://user:hunter2@push.example/push?key=s3cret#frag"), subscriber.WithUnauthenticatedPush(),
		subscriber.WithLogger(logs.Logger()))
	require.NoError(t, err)
	_, err = subscriber.Open(testContext(t), client, subID, subscriber.WithPush("https://push.example/other?key=t0ken"),
		subscriber.WithUnauthenticatedPush(), subscriber.WithLogger(logs.Logger()))
	require.NoError(t, err)
	recs := logs.Records(t)
	require.NotEmpty(t, recs)
	all, err := json.Marshal(recs)
	require.NoError(t, err)
	for _, secret := range []string{"hunter2", "s3cret", "t0ken", "frag"} {
		assert.NotContains(t, string(all), secret)
	}
	assert.Contains(t, string(all), "https://push.example/push", "the endpoint is still named")
	assert.Equal(t, "https://user:hunter2@push.example/push?key=s3cret#frag", s.PushEndpoint(), "the API reports it whole")
}

// TestPushValidatorBuiltAgain: a failure to make the production validator
// is answered 500 and not kept: the next request makes it again. It
// replaces how validators are made, so it does not run in parallel.
func TestPushValidatorBuiltAgain(t *testing.T) {
	srv, client := harness.Fake(t)
	validator, err := srv.TokenValidator(testContext(t))
	require.NoError(t, err)
	var mu sync.Mutex
	builds := 0
	defer subscriber.SetNewValidator(func(context.Context) (*idtoken.Validator, error) {
		mu.Lock()
		defer mu.Unlock()
		if builds++; builds == 1 {
			return nil, errors.New("injected: no credentials")
		}
		return validator, nil
	})()
	mux := http.NewServeMux()
	web := httptest.NewServer(mux)
	defer web.Close()
	topic, subID := names()
	endpoint := web.URL + "/push"
	s, err := subscriber.CreateWithTopic(testContext(t), client, topic, subID, subscriber.WithPush(endpoint),
		subscriber.WithPushAuth(pusher, ""), subscriber.WithLogger(slog.New(slog.DiscardHandler)))
	require.NoError(t, err)
	ran := make(chan struct{}, 1)
	mux.Handle("/push", s.PushHandler(func(context.Context, *subscriber.Delivery) error {
		ran <- struct{}{}
		return nil
	}))
	defer func() { require.NoError(t, s.Close(context.Background())) }()
	e := pushEnv{endpoint: endpoint}
	token, err := srv.SignToken(srv.PushClaims(pusher, endpoint))
	require.NoError(t, err)
	assert.Equal(t, http.StatusInternalServerError, e.post(t, http.MethodPost, token, pushBody(t, s.Name(), "m-1", "k", "x")))
	require.Equal(t, http.StatusNoContent, e.post(t, http.MethodPost, token, pushBody(t, s.Name(), "m-1", "k", "x")))
	select {
	case <-ran:
	case <-time.After(testTimeout):
		t.Fatal("the handler did not run")
	}
	mu.Lock()
	defer mu.Unlock()
	assert.Equal(t, 2, builds)
}

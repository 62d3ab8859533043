package orderingtest_test

import (
	"encoding/json"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/keyorder/keyorder/ordering/orderingtest"
)

// pushed is one push request as an endpoint received it.
type pushed struct {
	at     time.Time
	path   string
	header http.Header
	body   []byte
	env    envelope // decoded from a wrapped request
	key    string   // of the payload "key/seq", when it is one
	seq    int
}

// envelope is the JSON of a wrapped push request, as an endpoint decodes it.
type envelope struct {
	Message struct {
		Attributes   map[string]string `json:"attributes"`
		Data         []byte            `json:"data"`
		MessageID    string            `json:"messageId"`
		MessageID2   string            `json:"message_id"`
		PublishTime  time.Time         `json:"publishTime"`
		PublishTime2 time.Time         `json:"publish_time"`
		OrderingKey  string            `json:"orderingKey"`
	} `json:"message"`
	Subscription    string `json:"subscription"`
	DeliveryAttempt int    `json:"deliveryAttempt"`
}

// endpoint is a push endpoint served by httptest. It records every request
// and answers with the status answer returns; answer may block, and should
// then also watch the request's context, which ends when the server
// cancels the request. A 102 is sent as an interim answer followed by a
// 500, so that only the 102 can acknowledge; a 3xx redirects to
// /elsewhere.
type endpoint struct {
	*httptest.Server
	t        testing.TB
	answer   func(r *http.Request, p pushed) int
	mu       sync.Mutex
	got      []pushed
	inflight map[string]int // by payload key, "" for other payloads
	most     map[string]int // the most in flight at once, by key
}

// newEndpoint starts an endpoint. Make it before the fixture that pushes
// to it: cleanups run last first, so the server, closed first, cancels
// the requests still in flight before the endpoint closes.
func newEndpoint(t testing.TB, answer func(r *http.Request, p pushed) int) *endpoint {
	e := &endpoint{t: t, answer: answer, inflight: map[string]int{}, most: map[string]int{}}
	e.Server = httptest.NewServer(http.HandlerFunc(e.serve))
	t.Cleanup(e.Close)
	return e
}

// newTLSEndpoint is newEndpoint served with TLS.
func newTLSEndpoint(t testing.TB, answer func(r *http.Request, p pushed) int) *endpoint {
	e := &endpoint{t: t, answer: answer, inflight: map[string]int{}, most: map[string]int{}}
	e.Server = httptest.NewUnstartedServer(http.HandlerFunc(e.serve))
	e.Config.ErrorLog = log.New(io.Discard, "", 0) // handshakes that fail on purpose
	e.StartTLS()
	t.Cleanup(e.Close)
	return e
}

func (e *endpoint) serve(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		return
	}
	p := pushed{at: time.Now(), path: r.URL.Path, header: r.Header.Clone(), body: body}
	data := body
	if r.Header.Get("Content-Type") == "application/json" {
		if !assert.NoError(e.t, json.Unmarshal(body, &p.env)) {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		data = p.env.Message.Data
	}
	if key, n, ok := strings.Cut(string(data), "/"); ok {
		p.key, p.seq = key, atoi(n)
	}
	e.mu.Lock()
	e.got = append(e.got, p)
	e.inflight[p.key]++
	e.most[p.key] = max(e.most[p.key], e.inflight[p.key])
	e.mu.Unlock()
	code := e.answer(r, p)
	e.mu.Lock()
	e.inflight[p.key]--
	e.mu.Unlock()
	switch {
	case code == http.StatusProcessing:
		w.WriteHeader(code)
		code = http.StatusInternalServerError
	case code >= 300 && code < 400:
		w.Header().Set("Location", "/elsewhere")
	}
	w.WriteHeader(code)
}

func atoi(s string) int {
	n, _ := strconv.Atoi(s)
	return n
}

// requests returns what the endpoint received so far, of key if not "".
func (e *endpoint) requests(key string) []pushed {
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []pushed
	for _, p := range e.got {
		if key == "" || p.key == key {
			out = append(out, p)
		}
	}
	return out
}

// mostInFlight returns the most requests of key that were in flight at once.
func (e *endpoint) mostInFlight(key string) int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.most[key]
}

// fastRetry is a retry policy that keeps tests quick.
func fastRetry(lo, hi time.Duration) *pubsubpb.RetryPolicy {
	return &pubsubpb.RetryPolicy{MinimumBackoff: durationpb.New(lo), MaximumBackoff: durationpb.New(hi)}
}

// newPushFixture makes the fixture's ordered subscription push to e, with
// a retry policy of 10 to 50 ms, which edit may change.
func newPushFixture(t testing.TB, e *endpoint, edit func(*pubsubpb.Subscription), opts ...orderingtest.Option) *fixture {
	return newFixture(t, func(p *pubsubpb.Subscription) {
		p.PushConfig = &pubsubpb.PushConfig{PushEndpoint: e.URL}
		p.RetryPolicy = fastRetry(10*time.Millisecond, 50*time.Millisecond)
		if edit != nil {
			edit(p)
		}
	}, opts...)
}

// ok answers every push with 204.
func ok(*http.Request, pushed) int { return http.StatusNoContent }

// TestPushOneOutstandingPerKey: a push subscription keeps one message of a
// key outstanding at a time. While the endpoint holds k/1, no other k
// request comes, and the other keys go on; once k/1 is answered, k's later
// messages follow in order.
func TestPushOneOutstandingPerKey(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	held := make(chan struct{})
	ep := newEndpoint(t, func(r *http.Request, p pushed) int {
		if p.key == "k" && p.seq == 1 {
			close(held)
			select {
			case <-release:
			case <-r.Context().Done():
			}
		}
		return http.StatusOK
	})
	f := newPushFixture(t, ep, nil)
	f.publish(f.topic, []string{"k", "a", "b"}, 0, 3)
	recv(t, held, "k/1")
	f.waitFor("a and b pushed", func() bool { return f.srv.Stats(f.sub).Acked == 6 })
	assert.Len(t, ep.requests("k"), 1, "nothing more of k while k/1 is outstanding")
	assert.Equal(t, 1, f.srv.Stats(f.sub).Outstanding)

	close(release)
	f.waitFor("everything pushed", func() bool { return f.srv.Stats(f.sub).Acked == 9 })
	c := orderingtest.NewChecker()
	for _, k := range []string{"k", "a", "b"} {
		c.Expect(k, 3)
		assert.Equal(t, 1, ep.mostInFlight(k), "key %s", k)
	}
	for _, p := range ep.requests("") {
		c.Record(p.key, p.seq)
	}
	require.NoError(t, c.Report().Err())
	for _, d := range f.srv.Deliveries(f.sub) {
		assert.Zero(t, d.Outstanding, "%s/%d sent while its key had a message outstanding", d.OrderingKey, d.Seq)
	}
}

// TestPushConcurrency: messages without a key go out side by side, up to
// the fake's bound of 32 requests in flight per subscription.
func TestPushConcurrency(t *testing.T) {
	t.Parallel()
	const bound, n = 32, 40
	release := make(chan struct{})
	arrived := make(chan struct{}, n)
	ep := newEndpoint(t, func(r *http.Request, _ pushed) int {
		arrived <- struct{}{}
		select {
		case <-release:
		case <-r.Context().Done():
		}
		return http.StatusOK
	})
	f := newPushFixture(t, ep, nil)
	_, err := f.client.TopicAdminClient.Publish(f.ctx, &pubsubpb.PublishRequest{Topic: f.topic, Messages: msgs(n, "")})
	require.NoError(t, err)
	for range bound {
		recv(t, arrived, "a request")
	}
	assert.Equal(t, bound, f.srv.Stats(f.sub).Outstanding, "no more leased than can be sent")
	close(release)
	f.waitFor("everything pushed", func() bool { return f.srv.Stats(f.sub).Acked == n })
	assert.Equal(t, bound, ep.mostInFlight(""))
}

// TestPushBackoff: a failing endpoint gets the message again after a
// backoff that doubles from the retry policy's minimum to its maximum, or
// from the service's 100 ms without a policy, and the key's next message
// waits until the first is acked.
func TestPushBackoff(t *testing.T) {
	t.Parallel()
	ms := time.Millisecond
	for _, tc := range []struct {
		name   string
		policy *pubsubpb.RetryPolicy
		gaps   []time.Duration // between the attempts at k/1, at least
	}{
		{"retry policy", fastRetry(50*ms, 120*ms), []time.Duration{50 * ms, 100 * ms, 120 * ms}},
		{"push backoff", nil, []time.Duration{100 * ms, 200 * ms, 400 * ms}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var mu sync.Mutex
			failed := 0 // attempts at k/1 failed so far
			ep := newEndpoint(t, func(_ *http.Request, p pushed) int {
				mu.Lock()
				defer mu.Unlock()
				if p.seq == 1 && failed < len(tc.gaps) {
					failed++
					return http.StatusServiceUnavailable
				}
				return http.StatusOK
			})
			f := newPushFixture(t, ep, func(p *pubsubpb.Subscription) { p.RetryPolicy = tc.policy })
			f.publish(f.topic, []string{"k"}, 0, 2)
			f.waitFor("both acked", func() bool { return f.srv.Stats(f.sub).Acked == 2 })

			got := ep.requests("k")
			require.Len(t, got, len(tc.gaps)+2)
			for i, want := range tc.gaps {
				gap := got[i+1].at.Sub(got[i].at)
				assert.GreaterOrEqual(t, gap, want, "backoff %d", i+1)
				assert.Less(t, gap, want+slack, "backoff %d", i+1)
			}
			for i, p := range got {
				want := 1
				if i == len(got)-1 {
					want = 2
				}
				assert.Equal(t, want, p.seq, "request %d: k/2 only after k/1 is acked", i)
			}
			st := f.srv.Stats(f.sub)
			assert.Equal(t, len(tc.gaps), st.Nacked)
			assert.Equal(t, len(tc.gaps)+2, st.Delivered)
			assert.Equal(t, len(tc.gaps)+1, f.srv.Deliveries(f.sub)[len(tc.gaps)].Attempt)
		})
	}
}

// TestPushAckDeadline: a request not answered within the ack deadline is
// cancelled and counts as a nack: the lease expires, and the message is
// pushed again.
func TestPushAckDeadline(t *testing.T) {
	t.Parallel()
	const deadline = 300 * time.Millisecond
	cancelled := make(chan struct{})
	var once sync.Once
	ep := newEndpoint(t, func(r *http.Request, _ pushed) int {
		first := false
		once.Do(func() { first = true })
		if first {
			<-r.Context().Done() // the server gives up on the request
			close(cancelled)
		}
		return http.StatusOK
	})
	f := newPushFixture(t, ep, nil, orderingtest.WithAckDeadline(deadline))
	f.publish(f.topic, []string{"k"}, 0, 1)
	recv(t, cancelled, "the first request's cancellation")
	f.waitFor("acked", func() bool { return f.srv.Stats(f.sub).Acked == 1 })
	assert.Len(t, ep.requests("k"), 2)
	log := f.srv.Deliveries(f.sub)
	require.Len(t, log, 2)
	assert.GreaterOrEqual(t, log[1].At.Sub(log[0].At), deadline, "sent again once the lease ran out")
	st := f.srv.Stats(f.sub)
	assert.Equal(t, 1, st.Expired)
	assert.Zero(t, st.Nacked)
}

// TestPushDeadLetter: a message its endpoint keeps failing is dead-lettered
// after max_delivery_attempts, with the service's attributes; each request
// tells its delivery attempt, and the key's next message goes once the
// failing one is dead-lettered.
func TestPushDeadLetter(t *testing.T) {
	t.Parallel()
	ep := newEndpoint(t, func(_ *http.Request, p pushed) int {
		if p.seq == 1 {
			return http.StatusInternalServerError
		}
		return http.StatusOK
	})
	f := newFixture(t, nil)
	src := f.deadLettering(5, func(p *pubsubpb.Subscription) {
		p.PushConfig = &pubsubpb.PushConfig{PushEndpoint: ep.URL}
		p.RetryPolicy = fastRetry(time.Millisecond, 5*time.Millisecond)
	})
	f.publish(f.topic, []string{"k"}, 0, 2)
	f.waitFor("k/1 dead-lettered, k/2 acked", func() bool {
		st := f.srv.Stats(src)
		return st.DeadLettered == 1 && st.Acked == 1
	})

	var attempts, seqs []int
	for _, p := range ep.requests("k") {
		attempts = append(attempts, p.env.DeliveryAttempt)
		seqs = append(seqs, p.seq)
	}
	assert.Equal(t, []int{1, 2, 3, 4, 5, 1}, attempts)
	assert.Equal(t, []int{1, 1, 1, 1, 1, 2}, seqs)
	dead := f.pullNow(deadSub, 10)
	require.Len(t, dead, 1)
	assert.Equal(t, "k/1", string(dead[0].Message.Data))
	assert.Equal(t, "5", dead[0].Message.Attributes["CloudPubSubDeadLetterSourceDeliveryCount"])
	assert.Equal(t, "src", dead[0].Message.Attributes["CloudPubSubDeadLetterSourceSubscription"])
}

// TestPushEnvelope: a wrapped push request is a POST of the JSON envelope
// the service sends: the message with its data in base64, its attributes,
// its ID and publish time in both spellings and its ordering key, and the
// subscription's name; no deliveryAttempt without a dead-letter policy.
func TestPushEnvelope(t *testing.T) {
	t.Parallel()
	got := make(chan pushed, 2)
	methods := make(chan string, 2)
	ep := newEndpoint(t, func(r *http.Request, p pushed) int {
		methods <- r.Method
		got <- p
		return http.StatusOK
	})
	f := newPushFixture(t, ep, nil)
	for _, m := range []*pubsubpb.PubsubMessage{
		{Data: []byte("k/1"), OrderingKey: "k", Attributes: map[string]string{"color": "blue"}},
		{Data: []byte("bare")},
	} {
		_, err := f.client.TopicAdminClient.Publish(f.ctx, &pubsubpb.PublishRequest{Topic: f.topic, Messages: []*pubsubpb.PubsubMessage{m}})
		require.NoError(t, err)
	}
	stored := map[string]orderingtest.Message{}
	for _, m := range f.srv.Messages(f.topic) {
		stored[m.ID] = m
	}
	fieldsOf := map[string]map[string]bool{ // by data
		"k/1":  {"attributes": true, "data": true, "messageId": true, "message_id": true, "publishTime": true, "publish_time": true, "orderingKey": true},
		"bare": {"data": true, "messageId": true, "message_id": true, "publishTime": true, "publish_time": true},
	}
	for range 2 { // in either order: one of them has no key
		assert.Equal(t, http.MethodPost, recv(t, methods, "a request"))
		p := recv(t, got, "a request")
		assert.Equal(t, "application/json", p.header.Get("Content-Type"))
		assert.Contains(t, p.header.Get("User-Agent"), "APIs-Google")
		assert.Empty(t, p.header.Get("Authorization"), "no token unless the subscription asks")

		var top map[string]any
		require.NoError(t, json.Unmarshal(p.body, &top))
		assert.ElementsMatch(t, []string{"message", "subscription"}, keysOf(top))
		msg := top["message"].(map[string]any)
		fields := map[string]bool{}
		for k := range msg {
			fields[k] = true
		}
		e := p.env
		assert.Equal(t, fieldsOf[string(e.Message.Data)], fields, "message %q", e.Message.Data)

		m := stored[e.Message.MessageID]
		assert.Equal(t, f.sub, e.Subscription)
		assert.Equal(t, m.Data, e.Message.Data)
		assert.Equal(t, m.ID, e.Message.MessageID)
		assert.Equal(t, m.ID, e.Message.MessageID2)
		assert.True(t, m.PublishTime.Equal(e.Message.PublishTime), "%v != %v", m.PublishTime, e.Message.PublishTime)
		assert.True(t, m.PublishTime.Equal(e.Message.PublishTime2))
		assert.Equal(t, m.OrderingKey, e.Message.OrderingKey)
		assert.Equal(t, m.Attributes, e.Message.Attributes)
	}
}

func keysOf(m map[string]any) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

// TestPushUnwrapped: with NoWrapper the body is the message's data; with
// write_metadata the metadata travel as x-goog-pubsub-* headers and the
// attributes as headers of their own names.
func TestPushUnwrapped(t *testing.T) {
	t.Parallel()
	for _, metadata := range []bool{true, false} {
		t.Run("write_metadata="+strconv.FormatBool(metadata), func(t *testing.T) {
			t.Parallel()
			got := make(chan pushed, 1)
			ep := newEndpoint(t, func(_ *http.Request, p pushed) int {
				got <- p
				return http.StatusOK
			})
			f := newFixture(t, nil)
			src := f.deadLettering(0, func(p *pubsubpb.Subscription) { // for the delivery attempt
				p.PushConfig = &pubsubpb.PushConfig{PushEndpoint: ep.URL, Wrapper: &pubsubpb.PushConfig_NoWrapper_{
					NoWrapper: &pubsubpb.PushConfig_NoWrapper{WriteMetadata: metadata},
				}}
			})
			_, err := f.client.TopicAdminClient.Publish(f.ctx, &pubsubpb.PublishRequest{Topic: f.topic, Messages: []*pubsubpb.PubsubMessage{
				{Data: []byte("k/1"), OrderingKey: "k", Attributes: map[string]string{"color": "blue"}},
			}})
			require.NoError(t, err)
			p := recv(t, got, "the request")
			m := f.srv.Messages(f.topic)[0]
			assert.Equal(t, "k/1", string(p.body))
			assert.Empty(t, p.header.Get("Content-Type"))
			if !metadata {
				for name := range p.header {
					assert.False(t, strings.HasPrefix(strings.ToLower(name), "x-goog-pubsub-"), name)
				}
				assert.Empty(t, p.header.Get("color"))
				return
			}
			assert.Equal(t, src, p.header.Get("x-goog-pubsub-subscription-name"))
			assert.Equal(t, m.ID, p.header.Get("x-goog-pubsub-message-id"))
			at, err := time.Parse(time.RFC3339Nano, p.header.Get("x-goog-pubsub-publish-time"))
			require.NoError(t, err)
			assert.True(t, m.PublishTime.Equal(at))
			assert.Equal(t, "k", p.header.Get("x-goog-pubsub-ordering-key"))
			assert.Equal(t, "1", p.header.Get("x-goog-pubsub-delivery-attempt"))
			assert.Equal(t, "blue", p.header.Get("color"))
		})
	}
}

// TestPushStatusCodes: the service counts 102, 200, 201, 202 and 204 as
// acknowledgements, and every other answer as a failure; a redirect is not
// followed.
func TestPushStatusCodes(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	answered := map[string]bool{} // paths answered with their code once
	ep := newEndpoint(t, func(r *http.Request, p pushed) int {
		mu.Lock()
		first := !answered[p.path]
		answered[p.path] = true
		mu.Unlock()
		if !first || p.path == "/elsewhere" {
			return http.StatusOK
		}
		return atoi(strings.TrimPrefix(p.path, "/"))
	})
	f := newFixture(t, nil)
	acks := map[int]bool{102: true, 200: true, 201: true, 202: true, 204: true, 203: false, 205: false, 302: false, 400: false, 404: false, 429: false, 500: false, 503: false}
	for code := range acks {
		f.createSubscription(&pubsubpb.Subscription{
			Name: subName("code-" + strconv.Itoa(code)), Topic: f.topic,
			PushConfig:  &pubsubpb.PushConfig{PushEndpoint: ep.URL + "/" + strconv.Itoa(code)},
			RetryPolicy: fastRetry(time.Millisecond, time.Millisecond),
		})
	}
	_, err := f.client.TopicAdminClient.Publish(f.ctx, &pubsubpb.PublishRequest{Topic: f.topic, Messages: msgs(1, "")})
	require.NoError(t, err)
	for code, ack := range acks {
		sub := subName("code-" + strconv.Itoa(code))
		f.waitFor("the message acked", func() bool { return f.srv.Stats(sub).Acked == 1 })
		st := f.srv.Stats(sub)
		if ack {
			assert.Equal(t, 1, st.Delivered, "%d acknowledges", code)
			assert.Zero(t, st.Nacked, "%d acknowledges", code)
		} else {
			assert.Equal(t, 2, st.Delivered, "%d fails", code)
			assert.Equal(t, 1, st.Nacked, "%d fails", code)
		}
	}
}

// TestPushToken: with an OIDC token, each request carries a bearer token
// that the server's TokenValidator accepts, for the audience the
// subscription names or, without one, the endpoint's URL, with the claims
// of Google's push tokens. Tokens signed otherwise, expired or for another
// audience are refused.
func TestPushToken(t *testing.T) {
	t.Parallel()
	const email = "pusher@keyorder-test.iam.gserviceaccount.com"
	got := make(chan pushed, 2)
	ep := newEndpoint(t, func(_ *http.Request, p pushed) int {
		got <- p
		return http.StatusOK
	})
	f := newFixture(t, nil)
	for id, aud := range map[string]string{"default-aud": "", "named-aud": "https://example.com/push"} {
		f.createSubscription(&pubsubpb.Subscription{Name: subName(id), Topic: f.topic, PushConfig: &pubsubpb.PushConfig{
			PushEndpoint:         ep.URL + "/" + id,
			AuthenticationMethod: &pubsubpb.PushConfig_OidcToken_{OidcToken: &pubsubpb.PushConfig_OidcToken{ServiceAccountEmail: email, Audience: aud}},
		}})
	}
	v, err := f.srv.TokenValidator(f.ctx)
	require.NoError(t, err)
	_, err = f.client.TopicAdminClient.Publish(f.ctx, &pubsubpb.PublishRequest{Topic: f.topic, Messages: msgs(1, "")})
	require.NoError(t, err)

	for range 2 {
		p := recv(t, got, "a request")
		aud := map[string]string{"/default-aud": ep.URL + "/default-aud", "/named-aud": "https://example.com/push"}[p.path]
		tok, ok := strings.CutPrefix(p.header.Get("Authorization"), "Bearer ")
		require.True(t, ok, "a bearer token: %q", p.header.Get("Authorization"))
		payload, err := v.Validate(f.ctx, tok, aud)
		require.NoError(t, err, p.path)
		assert.Equal(t, "https://accounts.google.com", payload.Issuer)
		assert.Equal(t, aud, payload.Audience)
		assert.Equal(t, int64(3600), payload.Expires-payload.IssuedAt)
		assert.WithinDuration(t, time.Now(), time.Unix(payload.IssuedAt, 0), time.Minute)
		assert.Equal(t, email, payload.Claims["email"])
		assert.Equal(t, true, payload.Claims["email_verified"])
		assert.NotEmpty(t, payload.Subject)
		assert.Equal(t, payload.Subject, payload.Claims["azp"])
		_, err = v.Validate(f.ctx, tok, "https://elsewhere.example.com")
		assert.Error(t, err, "another audience")
	}

	aud := "https://example.com/push"
	sign := func(edit func(map[string]any)) string {
		claims := f.srv.PushClaims(email, aud)
		edit(claims)
		tok, err := f.srv.SignToken(claims)
		require.NoError(t, err)
		return tok
	}
	good := sign(func(map[string]any) {})
	payload, err := v.Validate(f.ctx, good, aud)
	require.NoError(t, err, "a token SignToken made of PushClaims")
	assert.Equal(t, email, payload.Claims["email"])

	other := sign(func(c map[string]any) { c["email"] = "intruder@example.com" })
	payload, err = v.Validate(f.ctx, other, aud)
	require.NoError(t, err, "the validator leaves the email to the endpoint")
	assert.Equal(t, "intruder@example.com", payload.Claims["email"])

	forged, err := f.srv.ForgeToken(f.srv.PushClaims(email, aud))
	require.NoError(t, err)
	for name, tok := range map[string]string{
		"expired":        sign(func(c map[string]any) { c["exp"] = time.Now().Add(-time.Minute).Unix() }),
		"wrong audience": sign(func(c map[string]any) { c["aud"] = "https://elsewhere.example.com" }),
		"forged":         forged,
		"tampered":       good[:strings.LastIndex(good, ".")] + "." + strings.Repeat("A", 342),
		"not a token":    "hello",
	} {
		_, err := v.Validate(f.ctx, tok, aud)
		assert.Error(t, err, name)
	}
	otherServer := orderingtest.Start(t)
	stranger, err := otherServer.SignToken(otherServer.PushClaims(email, aud))
	require.NoError(t, err)
	_, err = v.Validate(f.ctx, stranger, aud)
	assert.Error(t, err, "another server's key is not trusted")
}

// TestPushTLS: the server pushes to https endpoints with the client
// WithPushClient gives it; its own client does not trust a test's
// certificate, and the push fails.
func TestPushTLS(t *testing.T) {
	t.Parallel()
	ep := newTLSEndpoint(t, ok)
	f := newPushFixture(t, ep, nil, orderingtest.WithPushClient(ep.Client()))
	f.publish(f.topic, []string{"k"}, 0, 1)
	f.waitFor("acked", func() bool { return f.srv.Stats(f.sub).Acked == 1 })
	assert.Len(t, ep.requests(""), 1)

	untrusting := newPushFixture(t, ep, nil)
	untrusting.publish(untrusting.topic, []string{"k"}, 0, 1)
	untrusting.waitFor("a failed push", func() bool { return untrusting.srv.Stats(untrusting.sub).Nacked >= 1 })
	assert.Zero(t, untrusting.srv.Stats(untrusting.sub).Acked)
}

// TestPushStops: deleting a push subscription, or closing the server,
// cancels its requests in flight and stops its workers; goleak, in
// TestMain, checks that none is left.
func TestPushStops(t *testing.T) {
	t.Parallel()
	for _, how := range []string{"delete", "close"} {
		t.Run(how, func(t *testing.T) {
			t.Parallel()
			arrived := make(chan struct{}, 1)
			cancelled := make(chan struct{})
			ep := newEndpoint(t, func(r *http.Request, _ pushed) int {
				arrived <- struct{}{}
				<-r.Context().Done()
				close(cancelled)
				return http.StatusOK
			})
			f := newPushFixture(t, ep, nil)
			f.publish(f.topic, []string{"k"}, 0, 1)
			recv(t, arrived, "the request")
			if how == "delete" {
				require.NoError(t, f.client.SubscriptionAdminClient.DeleteSubscription(f.ctx, &pubsubpb.DeleteSubscriptionRequest{Subscription: f.sub}))
			} else {
				require.NoError(t, f.srv.Close())
			}
			recv(t, cancelled, "the request's cancellation")
		})
	}
}

// TestPushConfigValidation: push configurations are validated and
// completed as the service does it, except that http endpoints are
// accepted.
func TestPushConfigValidation(t *testing.T) {
	t.Parallel()
	ep := newEndpoint(t, ok)
	f := newFixture(t, nil)
	sc := f.client.SubscriptionAdminClient
	oidc := func(email string) *pubsubpb.PushConfig_OidcToken_ {
		return &pubsubpb.PushConfig_OidcToken_{OidcToken: &pubsubpb.PushConfig_OidcToken{ServiceAccountEmail: email}}
	}
	for i, tc := range []struct {
		name string
		sub  *pubsubpb.Subscription
		ok   bool
	}{
		{"http endpoint", &pubsubpb.Subscription{PushConfig: &pubsubpb.PushConfig{PushEndpoint: ep.URL}}, true},
		{"https endpoint", &pubsubpb.Subscription{PushConfig: &pubsubpb.PushConfig{PushEndpoint: "https://example.com/push"}}, true},
		{"relative endpoint", &pubsubpb.Subscription{PushConfig: &pubsubpb.PushConfig{PushEndpoint: "/push"}}, false},
		{"not a URL", &pubsubpb.Subscription{PushConfig: &pubsubpb.PushConfig{PushEndpoint: "http://[::1"}}, false},
		{"another scheme", &pubsubpb.Subscription{PushConfig: &pubsubpb.PushConfig{PushEndpoint: "ftp://example.com/push"}}, false},
		{"exactly once", &pubsubpb.Subscription{EnableExactlyOnceDelivery: true, PushConfig: &pubsubpb.PushConfig{PushEndpoint: ep.URL}}, false},
		{"token without email", &pubsubpb.Subscription{PushConfig: &pubsubpb.PushConfig{PushEndpoint: ep.URL, AuthenticationMethod: oidc("")}}, false},
		{"token", &pubsubpb.Subscription{PushConfig: &pubsubpb.PushConfig{PushEndpoint: ep.URL, AuthenticationMethod: oidc("a@b.iam.gserviceaccount.com")}}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.sub.Name, tc.sub.Topic = subName("valid-"+strconv.Itoa(i)), f.topic
			got, err := sc.CreateSubscription(f.ctx, tc.sub)
			if !tc.ok {
				require.Error(t, err)
				assert.Equal(t, codes.InvalidArgument, status.Code(err), "%v", err)
				return
			}
			require.NoError(t, err)
			assert.NotNil(t, got.PushConfig.GetPubsubWrapper(), "wrapped by default")
			assert.Equal(t, "v1", got.PushConfig.Attributes["x-goog-version"])
		})
	}
}

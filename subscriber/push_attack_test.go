package subscriber_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/hmac"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/api/idtoken"
	"google.golang.org/api/option"

	"github.com/keyorder/keyorder/subscriber"
)

// The attacks on the push endpoint: each sends real HTTP requests to a real
// httptest server, with tokens made as an attacker would make them. The
// endpoint trusts a Google the tests play (fakeGoogle): its OIDC key set
// holds an RSA key, and IAP's key set, which idtoken also fetches and
// trusts, an ES256 key. An attacker knows both sets, as everyone may, and
// holds neither private key; the tests hold both, to sign what Google
// would, and show that only an RS256 token of the OIDC set gets in.

// fakeGoogle holds the keys of the Google the attack tests play.
type fakeGoogle struct {
	oidc    *rsa.PrivateKey
	oidcKid string
	iap     *ecdsa.PrivateKey
	iapKid  string
	sets    map[string][]byte // the JWK sets, by the URL idtoken fetches them from
}

// google is made once: an RSA key takes a while.
var google = sync.OnceValue(func() *fakeGoogle {
	oidc, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		panic(err)
	}
	iap, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		panic(err)
	}
	g := &fakeGoogle{oidc: oidc, oidcKid: "3f7b5e1c9a0d2468ace13579bdf02468ace13579", iap: iap, iapKid: "f9R3yg"}
	enc := base64.RawURLEncoding.EncodeToString
	g.sets = map[string][]byte{
		"https://www.googleapis.com/oauth2/v3/certs": mustJSON(map[string]any{"keys": []map[string]string{{
			"kty": "RSA", "alg": "RS256", "use": "sig", "kid": g.oidcKid,
			"n": enc(oidc.N.Bytes()), "e": enc(big.NewInt(int64(oidc.E)).Bytes()),
		}}}),
		"https://www.gstatic.com/iap/verify/public_key-jwk": mustJSON(map[string]any{"keys": []map[string]string{{
			"kty": "EC", "alg": "ES256", "use": "sig", "crv": "P-256", "kid": g.iapKid,
			"x": enc(iap.X.FillBytes(make([]byte, 32))), "y": enc(iap.Y.FillBytes(make([]byte, 32))),
		}}}),
	}
	return g
})

func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return b
}

// validator returns an idtoken validator that fetches g's key sets.
func (g *fakeGoogle) validator(t *testing.T) *idtoken.Validator {
	t.Helper()
	v, err := idtoken.NewValidator(testContext(t), option.WithHTTPClient(&http.Client{Transport: g}))
	require.NoError(t, err)
	return v
}

// RoundTrip serves g's key sets, and 404 for anything else.
func (g *fakeGoogle) RoundTrip(req *http.Request) (*http.Response, error) {
	res := &http.Response{StatusCode: http.StatusNotFound, Header: http.Header{}, Body: http.NoBody, Request: req}
	if set, ok := g.sets[req.URL.String()]; ok {
		res.StatusCode = http.StatusOK
		res.Header.Set("Content-Type", "application/json")
		res.Body = io.NopCloser(bytes.NewReader(set))
	}
	return res, nil
}

// jwt returns header.claims.sig, each encoded, sig made by sign from the
// signed part.
func jwt(header, claims map[string]any, sign func(signed []byte) []byte) string {
	return rawJWT(string(mustJSON(header)), claims, sign)
}

// rawJWT is jwt with a header written by hand.
func rawJWT(header string, claims map[string]any, sign func(signed []byte) []byte) string {
	signed := enc(header) + "." + enc(string(mustJSON(claims)))
	return signed + "." + base64.RawURLEncoding.EncodeToString(sign([]byte(signed)))
}

func rs256(key *rsa.PrivateKey) func([]byte) []byte {
	return func(signed []byte) []byte {
		sum := sha256.Sum256(signed)
		sig, err := rsa.SignPKCS1v15(rand.Reader, key, crypto.SHA256, sum[:])
		if err != nil {
			panic(err)
		}
		return sig
	}
}

func es256(key *ecdsa.PrivateKey) func([]byte) []byte {
	return func(signed []byte) []byte {
		sum := sha256.Sum256(signed)
		r, s, err := ecdsa.Sign(rand.Reader, key, sum[:])
		if err != nil {
			panic(err)
		}
		return append(r.FillBytes(make([]byte, 32)), s.FillBytes(make([]byte, 32))...)
	}
}

// claims are the claims of the service's push token for audience, issued
// now, changed by change.
func claims(audience string, change func(c map[string]any)) map[string]any {
	now := time.Now()
	c := map[string]any{
		"iss": "https://accounts.google.com", "aud": audience, "azp": "112233445566778899001", "sub": "112233445566778899001",
		"email": pusher, "email_verified": true, "iat": now.Unix(), "exp": now.Add(time.Hour).Unix(),
	}
	if change != nil {
		change(c)
	}
	return c
}

// pushToken is the token Google signs for a push to audience.
func (g *fakeGoogle) pushToken(audience string, change func(c map[string]any)) string {
	return jwt(map[string]any{"alg": "RS256", "kid": g.oidcKid, "typ": "JWT"}, claims(audience, change), rs256(g.oidc))
}

// attackEnv is a pushEnv whose endpoint trusts google(), and counts the
// handler's calls.
type attackEnv struct {
	pushEnv
	g     *fakeGoogle
	calls *atomic.Int32
}

func newAttackEnv(t *testing.T, sopts ...subscriber.Option) attackEnv {
	t.Helper()
	g := google()
	calls := new(atomic.Int32)
	e := newPushEnv(t, func(context.Context, *subscriber.Delivery) error {
		calls.Add(1)
		return nil
	}, append([]subscriber.Option{subscriber.WithTokenValidator(g.validator(t))}, sopts...)...)
	return attackEnv{pushEnv: e, g: g, calls: calls}
}

// TestPushAttackTokens: of the tokens an attacker can make, only Google's
// RS256 token of the OIDC key set, for the endpoint, of its account, gets
// in. An ES256 token of an IAP key with a short signature answers 401 (it
// panicked idtoken v0.312.0, and net/http dropped the connection); one
// that IAP's key signed with push claims, and tokens issued or valid only
// in the future, are refused (they got in).
func TestPushAttackTokens(t *testing.T) {
	t.Parallel()
	e := newAttackEnv(t)
	g, aud := e.g, e.endpoint
	attacker, err := rsa.GenerateKey(rand.Reader, 2048)
	require.NoError(t, err)
	pub, err := x509.MarshalPKIXPublicKey(&g.oidc.PublicKey)
	require.NoError(t, err)
	pemKey := pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pub})
	hs256 := func(key []byte) func([]byte) []byte {
		return func(signed []byte) []byte {
			m := hmac.New(sha256.New, key)
			m.Write(signed)
			return m.Sum(nil)
		}
	}
	header := func(alg, kid string) map[string]any { return map[string]any{"alg": alg, "kid": kid, "typ": "JWT"} }
	none := func([]byte) []byte { return nil }
	shortSig := func([]byte) []byte { return []byte{1, 2, 3} }
	in := func(d time.Duration) int64 { return time.Now().Add(d).Unix() }
	good := claims(aud, nil)
	for _, tc := range []struct {
		name  string
		token string
		want  int
	}{
		{"alg none", jwt(header("none", g.oidcKid), good, none), http.StatusUnauthorized},
		{"alg None", jwt(header("None", g.oidcKid), good, none), http.StatusUnauthorized},
		{"HS256 keyed with the PEM public key", jwt(header("HS256", g.oidcKid), good, hs256(pemKey)), http.StatusUnauthorized},
		{"HS256 keyed with the DER public key", jwt(header("HS256", g.oidcKid), good, hs256(pub)), http.StatusUnauthorized},
		{"RS256 by another key, Google's kid", jwt(header("RS256", g.oidcKid), good, rs256(attacker)), http.StatusUnauthorized},
		{"RS256 by another key, unknown kid", jwt(header("RS256", "0123456789abcdef0123456789abcdef01234567"), good, rs256(attacker)), http.StatusUnauthorized},
		{"RS256 without a kid", jwt(map[string]any{"alg": "RS256"}, good, rs256(g.oidc)), http.StatusUnauthorized},
		{"RS256 with a kid of IAP's set", jwt(header("RS256", g.iapKid), good, rs256(g.oidc)), http.StatusUnauthorized},
		{"RS256, signature stripped", jwt(header("RS256", g.oidcKid), good, none), http.StatusUnauthorized},
		{"Google's key, header in upper case", jwt(map[string]any{"ALG": "RS256", "KID": g.oidcKid}, good, rs256(g.oidc)), http.StatusUnauthorized},
		{"Google's key, alg twice", rawJWT(`{"alg":"ES256","alg":"RS256","kid":"`+g.oidcKid+`"}`, good, rs256(g.oidc)), http.StatusUnauthorized},
		{"ES256 of an IAP kid, short signature", jwt(header("ES256", g.iapKid), good, shortSig), http.StatusUnauthorized},
		{"ES256 signed by IAP's key, push claims", jwt(header("ES256", g.iapKid), good, es256(g.iap)), http.StatusUnauthorized},
		{"four segments", g.pushToken(aud, nil) + ".x", http.StatusUnauthorized},
		{"100 KB", g.pushToken(aud, func(c map[string]any) { c["pad"] = strings.Repeat("x", 100<<10) }), http.StatusUnauthorized},
		{"audience with a slash", g.pushToken(aud+"/", nil), http.StatusUnauthorized},
		{"audience in upper case", g.pushToken(strings.ToUpper(aud), nil), http.StatusUnauthorized},
		{"audience as a list", g.pushToken(aud, func(c map[string]any) { c["aud"] = []string{aud} }), http.StatusUnauthorized},
		{"no audience", g.pushToken("", nil), http.StatusUnauthorized},
		{"expired", g.pushToken(aud, func(c map[string]any) { c["exp"] = in(-time.Second) }), http.StatusUnauthorized},
		{"issued in an hour", g.pushToken(aud, func(c map[string]any) { c["iat"] = in(time.Hour) }), http.StatusUnauthorized},
		{"issued in two minutes", g.pushToken(aud, func(c map[string]any) { c["iat"] = in(2 * time.Minute) }), http.StatusUnauthorized},
		{"valid from an hour on", g.pushToken(aud, func(c map[string]any) { c["nbf"] = in(time.Hour) }), http.StatusUnauthorized},
		{"nbf not a number", g.pushToken(aud, func(c map[string]any) { c["nbf"] = "0" }), http.StatusUnauthorized},
		{"no iat", g.pushToken(aud, func(c map[string]any) { delete(c, "iat") }), http.StatusUnauthorized},
		{"issuer with a slash", g.pushToken(aud, func(c map[string]any) { c["iss"] = "https://accounts.google.com/" }), http.StatusUnauthorized},
		{"another account", g.pushToken(aud, func(c map[string]any) { c["email"] = "attacker@example.com" }), http.StatusForbidden},
		{"account in upper case", g.pushToken(aud, func(c map[string]any) { c["email"] = strings.ToUpper(pusher) }), http.StatusForbidden},
		{"email verified as a string", g.pushToken(aud, func(c map[string]any) { c["email_verified"] = "true" }), http.StatusForbidden},
	} {
		t.Run(tc.name, func(t *testing.T) {
			body := pushBody(t, e.sub.Name(), "m-"+strings.ReplaceAll(tc.name, " ", "-"), "k", "x")
			assert.Equal(t, tc.want, e.post(t, http.MethodPost, tc.token, body))
		})
	}
	assert.Zero(t, e.calls.Load(), "the handler never ran")

	// Google's own token, and one issued within the skew, get in.
	for i, token := range []string{g.pushToken(aud, nil), g.pushToken(aud, func(c map[string]any) { c["iat"], c["nbf"] = in(30*time.Second), in(30*time.Second) })} {
		body := pushBody(t, e.sub.Name(), fmt.Sprintf("m-good-%d", i), "k", "x")
		assert.Equal(t, http.StatusNoContent, e.post(t, http.MethodPost, token, body))
	}
	assert.Equal(t, int32(2), e.calls.Load())
}

func enc(s string) string { return base64.RawURLEncoding.EncodeToString([]byte(s)) }

// TestPushAttackTokenPanicsNothing: the ES256 token that panicked idtoken
// panics no handler that a server without a recover calls.
func TestPushAttackTokenPanicsNothing(t *testing.T) {
	t.Parallel()
	e := newAttackEnv(t)
	token := jwt(map[string]any{"alg": "ES256", "kid": e.g.iapKid}, claims(e.endpoint, nil), func([]byte) []byte { return []byte{1} })
	req := httptest.NewRequest(http.MethodPost, e.endpoint, bytes.NewReader(pushBody(t, e.sub.Name(), "m-1", "k", "x")))
	req.Header.Set("Authorization", "Bearer "+token)
	rec := httptest.NewRecorder()
	require.NotPanics(t, func() { e.mux.ServeHTTP(rec, req) })
	assert.Equal(t, http.StatusUnauthorized, rec.Code)
}

// rawRequest sends on a new connection to srv the head of a request whose
// body is 1000 bytes, and 10 of them, then nothing; it returns the
// response, read within a second, and whether the server closed the
// connection after it.
func rawRequest(t *testing.T, srv *httptest.Server, head string) (*http.Response, bool) {
	t.Helper()
	conn, err := net.Dial("tcp", srv.Listener.Addr().String())
	require.NoError(t, err)
	defer conn.Close()
	_, err = io.WriteString(conn, head+"Content-Length: 1000\r\n\r\n"+"<<<<<<<<<<")
	require.NoError(t, err)
	require.NoError(t, conn.SetReadDeadline(time.Now().Add(time.Second)))
	br := bufio.NewReader(conn)
	res, err := http.ReadResponse(br, nil)
	require.NoError(t, err, "no answer within a second")
	_, _ = io.Copy(io.Discard, res.Body)
	_ = res.Body.Close()
	_, err = br.ReadByte()
	return res, err == io.EOF
}

// TestPushAttackSlowBody: a request that sends 10 bytes of a 1000-byte
// body, then nothing, gets its refusal at once, whatever it is, and its
// connection closed: net/http used to read on for the rest before the
// answer left, for as long as the client liked.
func TestPushAttackSlowBody(t *testing.T) {
	t.Parallel()
	e := newAttackEnv(t)
	u := strings.TrimPrefix(e.web.URL, "http://")
	other := e.g.pushToken(e.endpoint, func(c map[string]any) { c["email"] = "attacker@example.com" })
	good := e.g.pushToken(e.endpoint, nil)
	for _, tc := range []struct {
		name, head string
		want       int
	}{
		{"PUT", "PUT /push HTTP/1.1\r\nHost: " + u + "\r\n", http.StatusMethodNotAllowed},
		{"no token", "POST /push HTTP/1.1\r\nHost: " + u + "\r\n", http.StatusUnauthorized},
		{"another account's token", "POST /push HTTP/1.1\r\nHost: " + u + "\r\nAuthorization: Bearer " + other + "\r\n", http.StatusForbidden},
		{"a good token, not an envelope", "POST /push HTTP/1.1\r\nHost: " + u + "\r\nAuthorization: Bearer " + good + "\r\n", http.StatusBadRequest},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res, closed := rawRequest(t, e.web, tc.head)
			assert.Equal(t, tc.want, res.StatusCode)
			assert.True(t, closed, "the connection is closed")
		})
	}
	assert.Zero(t, e.calls.Load())

	// After Close, a push is answered 503 as promptly.
	require.NoError(t, e.sub.Close(testContext(t)))
	res, closed := rawRequest(t, e.web, "POST /push HTTP/1.1\r\nHost: "+u+"\r\nAuthorization: Bearer "+good+"\r\n")
	assert.Equal(t, http.StatusServiceUnavailable, res.StatusCode)
	assert.True(t, closed)
}

// TestPushAttackSlowBodyHTTP2: on HTTP/2 a refusal comes at once too,
// while the body stalls, and leaves the connection open for the next
// request: closing it would drop the service's other pushes with it.
func TestPushAttackSlowBodyHTTP2(t *testing.T) {
	t.Parallel()
	e := newAttackEnv(t)
	h2 := httptest.NewUnstartedServer(e.mux)
	h2.EnableHTTP2 = true
	h2.StartTLS()
	defer h2.Close()
	client := h2.Client()
	var reused []bool
	trace := &httptrace.ClientTrace{GotConn: func(c httptrace.GotConnInfo) { reused = append(reused, c.Reused) }}
	ctx := httptrace.WithClientTrace(testContext(t), trace)

	body, stall := io.Pipe()
	defer stall.Close()
	go func() { _, _ = stall.Write([]byte("<<<<<<<<<<")) }()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, h2.URL+"/push", body)
	require.NoError(t, err)
	req.ContentLength = 1000
	start := time.Now()
	res, err := client.Do(req)
	require.NoError(t, err)
	_ = res.Body.Close()
	assert.Equal(t, "HTTP/2.0", res.Proto)
	assert.Equal(t, http.StatusUnauthorized, res.StatusCode)
	assert.Less(t, time.Since(start), 5*time.Second, "answered while the body stalls")

	req, err = http.NewRequestWithContext(ctx, http.MethodPost, h2.URL+"/push", bytes.NewReader(pushBody(t, e.sub.Name(), "m-h2", "k", "x")))
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+e.g.pushToken(e.endpoint, nil))
	res, err = client.Do(req)
	require.NoError(t, err)
	_ = res.Body.Close()
	assert.Equal(t, http.StatusNoContent, res.StatusCode)
	assert.Equal(t, []bool{false, true}, reused, "the second request took the first's connection")
}

// endless is a body that never ends; read counts the bytes taken from it.
type endless struct{ read atomic.Int64 }

func (b *endless) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = 'a'
	}
	b.read.Add(int64(len(p)))
	return len(p), nil
}

// TestPushAttackBigBodies: a 64 MB body and an endless one are refused,
// 400 with a token after 14 MB at most, 401 without one; the handler
// never runs.
func TestPushAttackBigBodies(t *testing.T) {
	t.Parallel()
	e := newAttackEnv(t)
	good := e.g.pushToken(e.endpoint, nil)
	send := func(token string, body io.Reader, size int64) int {
		req, err := http.NewRequestWithContext(testContext(t), http.MethodPost, e.endpoint, body)
		require.NoError(t, err)
		req.ContentLength = size
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			return 0 // the server closed the connection while the body was sent: refused
		}
		_ = res.Body.Close()
		return res.StatusCode
	}
	big := func() io.Reader {
		return io.MultiReader(strings.NewReader(`{"message":{"data":"`), io.LimitReader(&endless{}, 64<<20), strings.NewReader(`"}}`))
	}
	assert.Contains(t, []int{0, http.StatusBadRequest}, send(good, big(), -1), "64 MB, with a token")
	assert.Contains(t, []int{0, http.StatusUnauthorized}, send("", big(), -1), "64 MB, without a token")
	var forever endless
	assert.Contains(t, []int{0, http.StatusBadRequest}, send(good, &forever, -1), "endless, with a token")
	assert.Less(t, forever.read.Load(), int64(64<<20), "the endless body was not read on")
	var forever2 endless
	assert.Contains(t, []int{0, http.StatusUnauthorized}, send("", &forever2, -1), "endless, without a token")
	assert.Less(t, forever2.read.Load(), int64(16<<20))
	assert.Zero(t, e.calls.Load())
}

// TestPushAttackReplays: a push replayed, token and body, runs once; the
// same token with another subscription's body is refused, and a token for
// another endpoint does not open this one.
func TestPushAttackReplays(t *testing.T) {
	t.Parallel()
	e := newAttackEnv(t)
	token := e.g.pushToken(e.endpoint, nil)
	body := pushBody(t, e.sub.Name(), "m-replayed", "k", "x")
	for range 3 {
		assert.Equal(t, http.StatusNoContent, e.post(t, http.MethodPost, token, body))
	}
	assert.Equal(t, int32(1), e.calls.Load(), "a replay is a redelivery: it runs once (S6)")
	assert.EqualValues(t, 2, e.sub.Stats().Deduplicated)
	other := pushBody(t, "projects/p/subscriptions/other", "m-other", "k", "x")
	assert.Equal(t, http.StatusBadRequest, e.post(t, http.MethodPost, token, other))
	elsewhere := e.g.pushToken("https://elsewhere.example/push", nil)
	assert.Equal(t, http.StatusUnauthorized, e.post(t, http.MethodPost, elsewhere, pushBody(t, e.sub.Name(), "m-2", "k", "x")))
	assert.Equal(t, int32(1), e.calls.Load())
}

package push

import (
	"context"
	"crypto/rsa"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	"google.golang.org/api/idtoken"
)

// A push request's token. The service signs each with one of Google's
// OIDC keys, RS256, as the subscription's service account ("Authentication
// for push"). Before idtoken sees a token, its header must be that one:
// alg RS256, and a key ID of the validator's key set, the one published at
// https://www.googleapis.com/oauth2/v3/certs (or the fake's, with
// WithTokenValidator). That keeps out, unparsed, every other kind: alg
// none, HS256, and the ES256 tokens of IAP's key set, which idtoken also
// trusts, and whose short signatures make idtoken v0.312.0 slice past
// their end. Validation runs under a recover all the same: nothing a
// client sends may panic the handler.

// pushTokenAlg is the one algorithm the service signs push tokens with.
const pushTokenAlg = "RS256"

// tokenSkew is how far in the future a token's iat and nbf may be: clocks
// differ, Google's signers and the endpoint's both synchronised, by well
// under a second; a minute also covers a host whose clock drifts, and
// keeps out a token made to become valid later.
const tokenSkew = time.Minute

// maxTokenBytes bounds the token a request may carry: Google's push tokens
// are about 1 KB, more with a long audience.
const maxTokenBytes = 8 << 10

// maxKnownKeys bounds the key IDs a tokenChecker remembers: Google
// publishes two or three at a time.
const maxKnownKeys = 8

// googleIssuers are the issuers of Google's ID tokens.
var googleIssuers = map[string]bool{"https://accounts.google.com": true, "accounts.google.com": true}

// NewValidator makes the production validator; a test replaces it to make
// the first builds fail.
var NewValidator = func(ctx context.Context) (*idtoken.Validator, error) { return idtoken.NewValidator(ctx) }

// A tokenChecker checks the tokens of one push endpoint. Its methods are
// safe for concurrent use.
type tokenChecker struct {
	mu sync.Mutex
	// validator checks signatures: WithTokenValidator's, or made by the
	// first request that needs it. A failed build is not kept: the next
	// request tries again. Guarded by mu.
	validator *idtoken.Validator
	// known holds the key IDs found in the validator's key set, so that
	// each is looked up once; cleared when full. Guarded by mu.
	known map[string]bool
}

func newTokenChecker(v *idtoken.Validator) *tokenChecker {
	return &tokenChecker{validator: v, known: map[string]bool{}}
}

// get returns the validator, making it if it is not made yet.
func (c *tokenChecker) get() (*idtoken.Validator, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.validator == nil {
		v, err := NewValidator(context.Background())
		if err != nil {
			return nil, fmt.Errorf("making the token validator: %w", err)
		}
		c.validator = v
	}
	return c.validator, nil
}

// check checks the request's bearer token: the header the service signs
// with, a signature of the validator's key set, unexpired, issued and
// valid by now (with tokenSkew), for audience, issued by Google, of the
// account email, with the email verified. It returns 401 for a missing or
// bad token, 403 for a good token of someone else, and 500 if the
// validator cannot be made. Errors never hold the token.
func (c *tokenChecker) check(req *http.Request, email, audience string) (int, error) {
	scheme, token, ok := strings.Cut(req.Header.Get("Authorization"), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") || token == "" {
		return http.StatusUnauthorized, errNoToken
	}
	kid, err := tokenKeyID(token)
	if err != nil {
		return http.StatusUnauthorized, err
	}
	v, err := c.get()
	if err != nil {
		return http.StatusInternalServerError, err
	}
	if err := c.knownKey(req.Context(), v, kid); err != nil {
		return http.StatusUnauthorized, err
	}
	payload, err := validate(req.Context(), v, token, audience)
	if err != nil {
		return http.StatusUnauthorized, err
	}
	if err := checkTimes(payload, time.Now()); err != nil {
		return http.StatusUnauthorized, err
	}
	return checkClaims(payload, email)
}

// tokenKeyID returns the key ID of a token whose header is the one the
// service signs push tokens with, and an error for any other.
func tokenKeyID(token string) (string, error) {
	if len(token) > maxTokenBytes {
		return "", fmt.Errorf("token of %d bytes, over %d", len(token), maxTokenBytes)
	}
	seg, _, ok := strings.Cut(token, ".")
	if !ok || strings.Count(token, ".") != 2 {
		return "", errors.New("token is not a signed JWT")
	}
	raw, err := base64.RawURLEncoding.DecodeString(seg)
	if err != nil {
		return "", errors.New("token header is not base64url")
	}
	var h struct{ alg, kid, typ string }
	err = decodeObject(json.NewDecoder(strings.NewReader(string(raw))), fields{
		"alg": func(d *json.Decoder) error { return d.Decode(&h.alg) },
		"kid": func(d *json.Decoder) error { return d.Decode(&h.kid) },
		"typ": func(d *json.Decoder) error { return d.Decode(&h.typ) },
	})
	switch {
	case err != nil:
		return "", fmt.Errorf("token header: %w", err)
	case h.alg != pushTokenAlg:
		return "", fmt.Errorf("token signed %.16q, not %s", h.alg, pushTokenAlg)
	case h.typ != "" && h.typ != "JWT":
		return "", fmt.Errorf("token of type %.16q", h.typ)
	case !validKeyID(h.kid):
		return "", errors.New("token without a valid key ID")
	}
	return h.kid, nil
}

// validKeyID reports whether kid looks like a key ID of a JWK set: Google's
// are 40 hex digits; any 1 to 64 base64url characters pass.
func validKeyID(kid string) bool {
	if kid == "" || len(kid) > 64 {
		return false
	}
	for i := 0; i < len(kid); i++ {
		c := kid[i]
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c == '-' || c == '_') {
			return false
		}
	}
	return true
}

// knownKey checks that kid names a key of v's RS256 key set. idtoken shows
// no key set, so the check asks v itself, with a token of kid's header
// whose signature cannot be right: v answers rsa.ErrVerification only when
// it found kid's key to check it with. That costs v's cached key set and
// no RSA operation; a kid found is remembered.
func (c *tokenChecker) knownKey(ctx context.Context, v *idtoken.Validator, kid string) error {
	c.mu.Lock()
	known := c.known[kid]
	c.mu.Unlock()
	if known {
		return nil
	}
	if _, err := validate(ctx, v, probeToken(kid), ""); !errors.Is(err, rsa.ErrVerification) {
		return fmt.Errorf("token's key %q is not one of Google's OIDC keys: %v", kid, err)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.known) >= maxKnownKeys {
		clear(c.known)
	}
	c.known[kid] = true
	return nil
}

// probeToken returns an unexpired RS256 token of key kid, with a one-byte
// signature that no key verifies.
func probeToken(kid string) string {
	enc := base64.RawURLEncoding
	header, _ := json.Marshal(map[string]string{"alg": pushTokenAlg, "kid": kid})
	payload := fmt.Sprintf(`{"exp":%d}`, time.Now().Add(time.Hour).Unix())
	return enc.EncodeToString(header) + "." + enc.EncodeToString([]byte(payload)) + ".AA"
}

// validate is v.Validate, which must not panic the handler whatever the
// token.
func validate(ctx context.Context, v *idtoken.Validator, token, audience string) (p *idtoken.Payload, err error) {
	defer func() {
		if r := recover(); r != nil {
			p, err = nil, fmt.Errorf("token validation panicked: %v", r)
		}
	}()
	return v.Validate(ctx, token, audience)
}

// checkTimes refuses a token issued, or valid only from, later than now
// and tokenSkew: idtoken checks exp alone.
func checkTimes(p *idtoken.Payload, now time.Time) error {
	latest := now.Add(tokenSkew).Unix()
	if p.IssuedAt == 0 {
		return errors.New("token without iat")
	}
	if p.IssuedAt > latest {
		return fmt.Errorf("token issued at %d, in the future", p.IssuedAt)
	}
	if nbf, ok := p.Claims["nbf"]; ok {
		n, isNumber := nbf.(float64)
		if !isNumber || n > float64(latest) {
			return fmt.Errorf("token not valid before %v", nbf)
		}
	}
	return nil
}

// checkClaims checks that a valid token is Google's, of the account email,
// with the email verified.
func checkClaims(p *idtoken.Payload, email string) (int, error) {
	if !googleIssuers[p.Issuer] {
		return http.StatusUnauthorized, fmt.Errorf("token issued by %.64q, not Google", p.Issuer)
	}
	if got, _ := p.Claims["email"].(string); got != email {
		return http.StatusForbidden, fmt.Errorf("token of %.128q, not the subscription's account", got)
	}
	if verified, _ := p.Claims["email_verified"].(bool); !verified {
		return http.StatusForbidden, errors.New("token's email is not verified")
	}
	return 0, nil
}

var errNoToken = errors.New("no bearer token")

// refuse answers a request that the handler will not run with status and
// msg, without reading the rest of its body: on HTTP/1, net/http would
// otherwise read up to 256 KB of it before the answer leaves, for as long
// as a slow client takes, so the connection is closed instead. The read
// deadline ends a read at work, where the server supports one (HTTP/1 and
// HTTP/2 do; a wrapping ResponseWriter without Unwrap does not, and
// Connection: close still keeps net/http from reading on). On HTTP/2 an
// unread body holds only its stream, and Connection: close would shut
// down the whole connection, the service's other pushes with it.
func refuse(w http.ResponseWriter, req *http.Request, status int, msg string) {
	if req.ProtoMajor == 1 {
		w.Header().Set("Connection", "close")
	}
	_ = http.NewResponseController(w).SetReadDeadline(time.Now())
	http.Error(w, msg, status)
}

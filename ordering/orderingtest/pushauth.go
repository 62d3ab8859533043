package orderingtest

import (
	"bytes"
	"context"
	"crypto"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"math/big"
	"net/http"
	"sync"
	"time"

	"google.golang.org/api/idtoken"
	"google.golang.org/api/option"
)

// On a push subscription with an OIDC token, the service signs each request
// with a Google key, as the subscription's service account, and endpoints
// check the token against Google's public keys. The fake signs with a key
// of its own instead, and hands tests a validator that trusts that key and
// no other, so that an endpoint's production check runs unchanged.

// The claims of a Google-signed token for push ("Authentication for
// push"), and where its keys are published.
const (
	googleIssuer   = "https://accounts.google.com"
	googleCertsURL = "https://www.googleapis.com/oauth2/v3/certs" // as idtoken fetches it for RS256
	tokenLifetime  = time.Hour
	// tokenReuse is how long a push token is sent again before a new one
	// is signed: well within its hour, and it spares a signature per
	// request.
	tokenReuse = 10 * time.Minute
)

// A signer holds the server's RSA key, made the first time it is needed,
// so that servers without authenticated push never pay for it. Its methods
// are safe for concurrent use.
type signer struct {
	once sync.Once
	key  *rsa.PrivateKey
	kid  string
	err  error

	forgedOnce sync.Once
	forged     *rsa.PrivateKey // ForgeToken's, made likewise
	forgedErr  error

	mu     sync.Mutex
	tokens map[[2]string]signedToken // by email and audience
}

type signedToken struct {
	jwt    string
	issued time.Time
}

// signingKey returns the server's key and its key ID.
func (sg *signer) signingKey() (*rsa.PrivateKey, string, error) {
	sg.once.Do(func() {
		sg.key, sg.err = rsa.GenerateKey(rand.Reader, 2048)
		if sg.err != nil {
			sg.err = fmt.Errorf("orderingtest: signing key: %w", sg.err)
			return
		}
		sum := sha256.Sum256(sg.key.N.Bytes())
		sg.kid = hex.EncodeToString(sum[:20]) // 40 hex digits, like Google's key IDs
	})
	return sg.key, sg.kid, sg.err
}

// pushToken returns the token for a push request as email to audience.
func (sg *signer) pushToken(email, audience string) (string, error) {
	now := time.Now()
	sg.mu.Lock()
	defer sg.mu.Unlock()
	id := [2]string{email, audience}
	if t, ok := sg.tokens[id]; ok && now.Sub(t.issued) < tokenReuse {
		return t.jwt, nil
	}
	key, kid, err := sg.signingKey()
	if err != nil {
		return "", err
	}
	jwt, err := signJWT(key, kid, pushClaims(email, audience, now))
	if err != nil {
		return "", err
	}
	if sg.tokens == nil {
		sg.tokens = map[[2]string]signedToken{}
	}
	sg.tokens[id] = signedToken{jwt: jwt, issued: now}
	return jwt, nil
}

// pushClaims are the claims of the service's token for a push request, as
// "Authentication for push" shows them: the issuer, the audience, the
// service account's email, verified, and its unique ID as sub and azp,
// issued now for an hour. The fake makes the unique ID, 21 digits, from
// the email, so that it stays the same from one request to the next.
func pushClaims(email, audience string, now time.Time) map[string]any {
	sum := sha256.Sum256([]byte(email))
	id := fmt.Sprintf("1%020d", binary.BigEndian.Uint64(sum[:8]))
	return map[string]any{
		"iss":            googleIssuer,
		"aud":            audience,
		"azp":            id,
		"sub":            id,
		"email":          email,
		"email_verified": true,
		"iat":            now.Unix(),
		"exp":            now.Add(tokenLifetime).Unix(),
	}
}

// signJWT signs claims RS256 with key, under kid.
func signJWT(key *rsa.PrivateKey, kid string, claims map[string]any) (string, error) {
	header, err := json.Marshal(map[string]string{"alg": "RS256", "kid": kid, "typ": "JWT"})
	if err != nil {
		return "", err
	}
	payload, err := json.Marshal(claims)
	if err != nil {
		return "", fmt.Errorf("orderingtest: token claims: %w", err)
	}
	enc := base64.RawURLEncoding
	signed := enc.EncodeToString(header) + "." + enc.EncodeToString(payload)
	sum := sha256.Sum256([]byte(signed))
	sig, err := rsa.SignPKCS1v15(rand.Reader, key, crypto.SHA256, sum[:])
	if err != nil {
		return "", fmt.Errorf("orderingtest: sign token: %w", err)
	}
	return signed + "." + enc.EncodeToString(sig), nil
}

// PushClaims returns the claims of the token the server attaches to a push
// request for a subscription whose OIDC token names serviceAccountEmail and
// audience (the endpoint's URL when the subscription names none), issued
// now: iss "https://accounts.google.com", aud, azp and sub (the account's
// unique ID, made up), email, email_verified true, iat, and exp an hour
// later, the last two in Unix seconds. Change one and sign them with
// SignToken to forge the tokens an endpoint must refuse.
func (s *Server) PushClaims(serviceAccountEmail, audience string) map[string]any {
	return pushClaims(serviceAccountEmail, audience, time.Now())
}

// SignToken returns a JWT carrying claims, signed RS256 by the server's own
// key under its key ID, as the server signs push tokens: a token that
// [Server.TokenValidator]'s validator accepts if the claims are right, for
// instance [Server.PushClaims] with exp in the past, another aud or another
// email for the tokens an endpoint must refuse. The key is made when the
// server first needs it; the error reports a failure to make it, or claims
// that do not marshal to JSON.
func (s *Server) SignToken(claims map[string]any) (string, error) {
	key, kid, err := s.signer.signingKey()
	if err != nil {
		return "", err
	}
	return signJWT(key, kid, claims)
}

// ForgeToken is SignToken with a key the server made for the purpose and
// trusts nowhere, under the key ID of the one it trusts: the token of an
// impostor who copied a real token's header, which a validator must refuse
// however right its claims.
func (s *Server) ForgeToken(claims map[string]any) (string, error) {
	sg := &s.signer
	_, kid, err := sg.signingKey()
	if err != nil {
		return "", err
	}
	sg.forgedOnce.Do(func() { sg.forged, sg.forgedErr = rsa.GenerateKey(rand.Reader, 2048) })
	if sg.forgedErr != nil {
		return "", fmt.Errorf("orderingtest: forging key: %w", sg.forgedErr)
	}
	return signJWT(sg.forged, kid, claims)
}

// TokenValidator returns a validator of Google ID tokens, made by
// idtoken.NewValidator, that trusts the server's signing key and no other:
// the keys it fetches from Google's certificate URL are the server's JWK
// set, served from memory. Give it to a push endpoint under test in place
// of the production validator, so that the endpoint's own verification
// runs on the tokens of the server's push requests. Like the production
// one, it checks the signature, the expiry and, when asked, the audience;
// the issuer and the email are the endpoint's to check in the payload.
func (s *Server) TokenValidator(ctx context.Context) (*idtoken.Validator, error) {
	key, kid, err := s.signer.signingKey()
	if err != nil {
		return nil, err
	}
	set, err := json.Marshal(map[string]any{"keys": []map[string]string{{
		"kty": "RSA",
		"alg": "RS256",
		"use": "sig",
		"kid": kid,
		"n":   base64.RawURLEncoding.EncodeToString(key.N.Bytes()),
		"e":   base64.RawURLEncoding.EncodeToString(big.NewInt(int64(key.E)).Bytes()),
	}}})
	if err != nil {
		return nil, err
	}
	return idtoken.NewValidator(ctx, option.WithHTTPClient(&http.Client{Transport: certsTransport(set)}))
}

// certsTransport answers GET requests for Google's certificate URL with a
// JWK set, and every other request with 404, without a network.
type certsTransport []byte

func (set certsTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Body != nil {
		req.Body.Close()
	}
	res := &http.Response{
		Status:     "404 Not Found",
		StatusCode: http.StatusNotFound,
		Proto:      "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header:  http.Header{},
		Body:    http.NoBody,
		Request: req,
	}
	if req.Method == http.MethodGet && req.URL.String() == googleCertsURL {
		res.Status, res.StatusCode = "200 OK", http.StatusOK
		res.Header.Set("Content-Type", "application/json")
		res.Header.Set("Cache-Control", "public, max-age=3600")
		res.Body = io.NopCloser(bytes.NewReader(set))
		res.ContentLength = int64(len(set))
	}
	return res, nil
}

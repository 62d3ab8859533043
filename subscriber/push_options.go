package subscriber

import (
	"log/slog"
	"net/url"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"github.com/keyorder/keyorder/subscriber/internal/push"
	"google.golang.org/api/idtoken"
)

// The push options, and the push settings of a subscription.

// WithPush makes [CreateWithTopic] create a push subscription: the service
// POSTs each message to endpoint, an absolute https URL (the emulator and
// ordering/orderingtest also take http), where [Subscription.PushHandler]
// answers. The subscription has message ordering, as any CreateWithTopic
// makes. An existing push subscription keeps its own endpoint and
// authentication, as it keeps its ordering (S1): [Subscription.PushEndpoint]
// and [Subscription.PushAuth] report them, and a difference from the
// options is logged as a warning. An existing pull subscription cannot
// serve a PushHandler: CreateWithTopic and Open refuse WithPush for one,
// with ErrInvalidConfig.
//
// A failed push comes back after the subscription's retry policy
// ([WithRetryPolicy]), not [WithBackoff], which spaces the retries that
// Receive makes itself; without a retry policy the service backs off from
// 100 ms up to 60 s.
//
// A push endpoint is a public URL: give it [WithPushAuth], so that only the
// subscription's service account can deliver to it. Without it,
// CreateWithTopic and Open refuse a push subscription unless
// [WithUnauthenticatedPush] says that is meant. Serve it from an
// http.Server with the timeouts [Subscription.PushHandler] names. The
// default is a pull subscription. DESIGN.md's "Security model" says what
// a push token proves.
func WithPush(endpoint string) Option {
	u, err := url.Parse(endpoint)
	return checked(err == nil && u.IsAbs() && (u.Scheme == "https" || u.Scheme == "http") && u.Host != "",
		func(c *config) { c.push.endpoint = endpoint }, "WithPush(%q): need an absolute https URL", endpoint)
}

// WithPushAuth makes the push subscription [CreateWithTopic] creates
// authenticate its requests: the service signs each with an OIDC token of
// serviceAccountEmail, for audience ("" for the endpoint's URL, as the
// service does), and [Subscription.PushHandler] refuses any request
// without a valid Google-signed token of that account for that audience.
// The account must exist and the service must be allowed to make its
// tokens (roles/iam.serviceAccountTokenCreator for the Pub/Sub service
// agent). On an existing subscription, the handler checks for the
// subscription's own account and audience; a difference from the option
// is logged as a warning, or refused with [WithStrictPushAuth]. Give each
// subscription an audience of its own (its endpoint's URL, the default,
// is one): a token binds neither the body nor the subscription, so two
// subscriptions of one account and audience take each other's tokens.
func WithPushAuth(serviceAccountEmail, audience string) Option {
	return checked(serviceAccountEmail != "",
		func(c *config) { c.push.email, c.push.audience = serviceAccountEmail, audience },
		"WithPushAuth: empty service account email")
}

// WithStrictPushAuth makes [CreateWithTopic] and [Open] refuse, with
// ErrInvalidConfig, an existing push subscription whose OIDC account or
// audience differs from [WithPushAuth]'s (an audience of "" stands for the
// endpoint's URL), rather than log the difference and check for the
// subscription's own: a subscription changed behind the program's back
// then stops the program instead of widening whom it trusts. It needs
// WithPushAuth. By default a difference is logged as a warning.
func WithStrictPushAuth() Option {
	return setting(func(c *config) { c.push.strictAuth = true })
}

// WithUnauthenticatedPush accepts a push subscription whose requests carry
// no token: anyone who learns the endpoint's URL can then deliver messages
// to it. It is for endpoints that something in front of them already
// authenticates, and for tests. The Subscription logs a warning once, when
// it is made. By default such a subscription is refused.
func WithUnauthenticatedPush() Option {
	return setting(func(c *config) { c.push.unauthenticated = true })
}

// WithTokenValidator sets the validator [Subscription.PushHandler] checks
// tokens with, in place of idtoken.NewValidator's, which fetches Google's
// public keys. Tests use the one ordering/orderingtest's Server makes,
// which trusts the fake's own key: the handler's checks are the same.
// v must not be nil.
func WithTokenValidator(v *idtoken.Validator) Option {
	return checked(v != nil, func(c *config) { c.push.validator = v }, "WithTokenValidator(nil)")
}

// pushOptions are the push settings the options ask for.
type pushOptions struct {
	endpoint        string
	email, audience string // WithPushAuth
	strictAuth      bool   // WithStrictPushAuth
	unauthenticated bool
	validator       *idtoken.Validator
}

func pushSettingsOf(sub *pubsubpb.Subscription) push.Settings {
	pc := sub.GetPushConfig()
	p := push.Settings{Endpoint: pc.GetPushEndpoint(), Wrapped: pc.GetNoWrapper() == nil}
	p.Metadata = pc.GetNoWrapper().GetWriteMetadata()
	if tok := pc.GetOidcToken(); tok != nil {
		p.Email, p.Audience = tok.GetServiceAccountEmail(), tok.GetAudience()
		if p.Audience == "" {
			p.Audience = p.Endpoint
		}
	}
	return p
}

// apply sets the push configuration on sub, a subscription about to be
// created.
func (o pushOptions) apply(sub *pubsubpb.Subscription) {
	if o.endpoint == "" {
		return
	}
	sub.PushConfig = &pubsubpb.PushConfig{PushEndpoint: o.endpoint}
	if o.email != "" {
		sub.PushConfig.AuthenticationMethod = &pubsubpb.PushConfig_OidcToken_{OidcToken: &pubsubpb.PushConfig_OidcToken{
			ServiceAccountEmail: o.email, Audience: o.audience,
		}}
	}
}

// check refuses a push subscription that PushHandler could not serve
// safely, and warns of one the options did not describe.
func (o pushOptions) check(log *slog.Logger, name string, have push.Settings) error {
	if o.strictAuth && o.email == "" {
		return invalid("WithStrictPushAuth without WithPushAuth: give the account and audience to insist on")
	}
	if have.Endpoint == "" {
		if o.endpoint != "" {
			return invalid("WithPush(%q): %s exists as a pull subscription, and keeps its delivery; drop WithPush, or delete the subscription to create it anew", redactURL(o.endpoint), name)
		}
		return nil
	}
	if !have.Wrapped && !have.Metadata {
		return invalid("push subscription %s sends bare payloads without metadata: keyorder needs the message ID and ordering key (set write_metadata, or use the wrapped envelope)", name)
	}
	if have.Email == "" && !o.unauthenticated {
		return invalid("push subscription %s has no push authentication: give it WithPushAuth, or accept that with WithUnauthenticatedPush", name)
	}
	if have.Email == "" {
		log.Warn("keyorder/subscriber: the push subscription's requests carry no token: anyone who knows the endpoint can deliver to it",
			"subscription", name, "endpoint", redactURL(have.Endpoint))
	}
	if o.endpoint != "" && o.endpoint != have.Endpoint {
		log.Warn("keyorder/subscriber: the subscription exists and keeps its own push endpoint, which differs from WithPush",
			"subscription", name, "endpoint", redactURL(have.Endpoint), "asked", redactURL(o.endpoint))
	}
	if o.email != "" && (o.email != have.Email || o.wantAudience(have) != have.Audience) {
		if o.strictAuth {
			return invalid("WithStrictPushAuth: %s pushes with tokens of %q for audience %q, not WithPushAuth's %q for %q; update its push configuration, or the option",
				name, have.Email, redactURL(have.Audience), o.email, redactURL(o.wantAudience(have)))
		}
		log.Warn("keyorder/subscriber: the subscription exists and keeps its own push authentication, which differs from WithPushAuth",
			"subscription", name, "account", have.Email, "audience", redactURL(have.Audience))
	}
	return nil
}

// wantAudience is the audience WithPushAuth asks for: its own, or else the
// endpoint's URL, WithPush's or, without it, the subscription's.
func (o pushOptions) wantAudience(have push.Settings) string {
	switch {
	case o.audience != "":
		return o.audience
	case o.endpoint != "":
		return o.endpoint
	}
	return have.Endpoint
}

// PushEndpoint returns the URL the service pushes the subscription's
// messages to, as the service reported it when the Subscription was made;
// "" for a pull subscription.
func (s *Subscription) PushEndpoint() string { return s.push.Endpoint }

// PushAuth returns the service account whose tokens the subscription's
// push requests carry, and the tokens' audience; "" and "" when they carry
// none.
func (s *Subscription) PushAuth() (serviceAccountEmail, audience string) {
	if s.push.Email == "" {
		return "", ""
	}
	return s.push.Email, s.push.Audience
}

// redactURL returns endpoint without what may be a secret: its user
// information, query and fragment, for the logs.
func redactURL(endpoint string) string {
	u, err := url.Parse(endpoint)
	if err != nil {
		return "(unparsable URL)"
	}
	u.User, u.RawQuery, u.ForceQuery, u.Fragment, u.RawFragment = nil, "", false, "", ""
	return u.String()
}

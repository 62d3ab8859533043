package orderingtest

import (
	"net/url"
	"regexp"
	"strings"
	"time"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
)

// The service's resource limits (cloud.google.com/pubsub/quotas, "Resource
// limits"). A request that breaks one is rejected as a whole, and nothing
// from it is stored.
const (
	maxOrderingKeyBytes = 1024
	maxAttributes       = 100
	maxAttrKeyBytes     = 256
	maxAttrValueBytes   = 1024
	maxRequestMessages  = 1000
	maxRequestBytes     = 10_000_000 // the service's request_size limit, in bytes
)

// Retention and deadline bounds the service accepts on topics and
// subscriptions.
const (
	minRetention             = 10 * time.Minute
	maxTopicRetention        = 31 * 24 * time.Hour
	defaultSubRetention      = 7 * 24 * time.Hour
	maxSubscriptionRetention = 31 * 24 * time.Hour
	defaultExpiration        = 31 * 24 * time.Hour
	minExpiration            = 24 * time.Hour
	defaultAckDeadlineSecs   = 10
	minAckDeadlineSecs       = 10
	maxAckDeadlineSecs       = 600
	defaultDeliveryAttempts  = 5
	minDeliveryAttempts      = 5
	maxDeliveryAttempts      = 100
	defaultMinBackoff        = 10 * time.Second
	maxBackoff               = 600 * time.Second
)

// A resource ID starts with a letter, is 3 to 255 characters of letters,
// digits and -_.~+%, and does not start with "goog" (resource name rules).
var (
	topicName        = regexp.MustCompile(`^projects/[^/]+/topics/([A-Za-z][-A-Za-z0-9_.~+%]{2,254})$`)
	subscriptionName = regexp.MustCompile(`^projects/[^/]+/subscriptions/([A-Za-z][-A-Za-z0-9_.~+%]{2,254})$`)
	projectName      = regexp.MustCompile(`^projects/[^/]+$`)
)

func invalid(format string, args ...any) error {
	return status.Errorf(codes.InvalidArgument, "orderingtest: "+format, args...)
}

func checkName(re *regexp.Regexp, name, what string) error {
	m := re.FindStringSubmatch(name)
	if m == nil || strings.HasPrefix(m[1], "goog") {
		return invalid("invalid %s name %q", what, name)
	}
	return nil
}

// validatePublish applies the service's limits to a whole request.
func validatePublish(req *pubsubpb.PublishRequest) error {
	if err := checkName(topicName, req.GetTopic(), "topic"); err != nil {
		return err
	}
	msgs := req.GetMessages()
	switch {
	case len(msgs) == 0:
		return invalid("a publish request needs at least one message")
	case len(msgs) > maxRequestMessages:
		return invalid("%d messages in one request; the limit is %d", len(msgs), maxRequestMessages)
	}
	if n := proto.Size(req); n > maxRequestBytes {
		return invalid("request of %d bytes; the limit is %d", n, maxRequestBytes)
	}
	for i, m := range msgs {
		// The service rejects a request that mixes ordering keys, the empty
		// key included, with FAILED_PRECONDITION ("In a single publish
		// request, all messages must have no ordering key or they must all
		// have the same ordering key").
		if m.GetOrderingKey() != msgs[0].GetOrderingKey() {
			return status.Errorf(codes.FailedPrecondition,
				"orderingtest: in a single publish request, all messages must have no ordering key or they must all have the same ordering key (message %d)", i)
		}
		if err := validateMessage(m); err != nil {
			return err
		}
	}
	return nil
}

// traceAttrPrefix starts the attributes in which the official clients,
// when they trace, send a message's trace context (googclient_traceparent):
// the service stores them, though it reserves the goog prefix.
const traceAttrPrefix = "googclient_"

func validateMessage(m *pubsubpb.PubsubMessage) error {
	if len(m.GetData()) == 0 && len(m.GetAttributes()) == 0 {
		return invalid("a message needs non-empty data or at least one attribute")
	}
	if n := len(m.GetOrderingKey()); n > maxOrderingKeyBytes {
		return invalid("ordering key of %d bytes; the limit is %d", n, maxOrderingKeyBytes)
	}
	if n := len(m.GetAttributes()); n > maxAttributes {
		return invalid("%d attributes; the limit is %d", n, maxAttributes)
	}
	for k, v := range m.GetAttributes() {
		switch {
		case len(k) > maxAttrKeyBytes:
			return invalid("attribute key of %d bytes; the limit is %d", len(k), maxAttrKeyBytes)
		case len(v) > maxAttrValueBytes:
			return invalid("attribute value of %d bytes; the limit is %d", len(v), maxAttrValueBytes)
		case strings.HasPrefix(k, "goog") && !strings.HasPrefix(k, traceAttrPrefix):
			return invalid("attribute key %q: the goog prefix is reserved", k)
		}
	}
	return nil
}

// retention checks an optional retention duration against [10 min, max]
// and returns it, or def when it is unset.
func retention(d *durationpb.Duration, def, max time.Duration, what string) (time.Duration, error) {
	if d == nil {
		return def, nil
	}
	v := d.AsDuration()
	if !d.IsValid() || v < minRetention || v > max {
		return 0, invalid("%s message retention %v outside [%v, %v]", what, v, minRetention, max)
	}
	return v, nil
}

// normalizeSubscription validates a subscription as the service does and
// fills in the service's defaults, in place.
func normalizeSubscription(p *pubsubpb.Subscription) error {
	switch secs := p.GetAckDeadlineSeconds(); {
	case secs == 0:
		p.AckDeadlineSeconds = defaultAckDeadlineSecs
	case secs < minAckDeadlineSecs || secs > maxAckDeadlineSecs:
		return invalid("ack deadline %d s outside [%d, %d]", secs, minAckDeadlineSecs, maxAckDeadlineSecs)
	}
	ret, err := retention(p.GetMessageRetentionDuration(), defaultSubRetention, maxSubscriptionRetention, "subscription")
	if err != nil {
		return err
	}
	p.MessageRetentionDuration = durationpb.New(ret)
	if err := normalizeExpiration(p, ret); err != nil {
		return err
	}
	if dlp := p.GetDeadLetterPolicy(); dlp != nil {
		if err := checkName(topicName, dlp.GetDeadLetterTopic(), "dead-letter topic"); err != nil {
			return err
		}
		switch n := dlp.GetMaxDeliveryAttempts(); {
		case n == 0:
			dlp.MaxDeliveryAttempts = defaultDeliveryAttempts
		case n < minDeliveryAttempts || n > maxDeliveryAttempts:
			return invalid("max delivery attempts %d outside [%d, %d]", n, minDeliveryAttempts, maxDeliveryAttempts)
		}
	}
	if _, err := parseFilter(p.GetFilter()); err != nil {
		return err
	}
	if err := normalizeRetryPolicy(p.GetRetryPolicy()); err != nil {
		return err
	}
	if p.GetBigqueryConfig() != nil || p.GetCloudStorageConfig() != nil {
		return status.Error(codes.Unimplemented, "orderingtest: only pull and push subscriptions are modelled")
	}
	if err := normalizePush(p); err != nil {
		return err
	}
	p.State = pubsubpb.Subscription_ACTIVE
	return nil
}

// normalizeRetryPolicy applies the service's bounds to a retry policy and
// fills in its defaults: backoffs of 0 to 600 s, 10 s at least and 600 s
// at most unless set, the minimum no greater than the maximum.
func normalizeRetryPolicy(rp *pubsubpb.RetryPolicy) error {
	if rp == nil {
		return nil
	}
	if rp.MinimumBackoff == nil {
		rp.MinimumBackoff = durationpb.New(defaultMinBackoff)
	}
	if rp.MaximumBackoff == nil {
		rp.MaximumBackoff = durationpb.New(maxBackoff)
	}
	lo, hi := rp.GetMinimumBackoff(), rp.GetMaximumBackoff()
	switch {
	case !lo.IsValid() || lo.AsDuration() < 0 || lo.AsDuration() > maxBackoff:
		return invalid("retry policy minimum backoff %v outside [0, %v]", lo.AsDuration(), maxBackoff)
	case !hi.IsValid() || hi.AsDuration() < 0 || hi.AsDuration() > maxBackoff:
		return invalid("retry policy maximum backoff %v outside [0, %v]", hi.AsDuration(), maxBackoff)
	case lo.AsDuration() > hi.AsDuration():
		return invalid("retry policy minimum backoff %v above the maximum, %v", lo.AsDuration(), hi.AsDuration())
	}
	return nil
}

// normalizePush validates a push subscription's configuration and fills in
// the service's defaults: the wrapped format, and the push format's
// version, x-goog-version, v1. The endpoint must be an absolute URL. The
// service requires https; the fake also takes http, as the emulator does,
// since tests serve endpoints with httptest. A push subscription takes no
// exactly-once delivery, which the service offers on pull only, and an
// OIDC token names the service account it signs as.
func normalizePush(p *pubsubpb.Subscription) error {
	pc := p.GetPushConfig()
	if pc.GetPushEndpoint() == "" {
		return nil
	}
	u, err := url.Parse(pc.GetPushEndpoint())
	if err != nil || !u.IsAbs() || u.Host == "" || (u.Scheme != "https" && u.Scheme != "http") {
		return invalid("invalid push endpoint %q: an absolute https (or, on this fake, http) URL is needed", pc.GetPushEndpoint())
	}
	if p.GetEnableExactlyOnceDelivery() {
		return invalid("exactly-once delivery is not supported on push subscriptions")
	}
	if tok := pc.GetOidcToken(); tok != nil && tok.GetServiceAccountEmail() == "" {
		return invalid("a push OIDC token needs a service account email")
	}
	if pc.Wrapper == nil {
		pc.Wrapper = &pubsubpb.PushConfig_PubsubWrapper_{PubsubWrapper: &pubsubpb.PushConfig_PubsubWrapper{}}
	}
	if pc.Attributes["x-goog-version"] == "" {
		if pc.Attributes == nil {
			pc.Attributes = map[string]string{}
		}
		pc.Attributes["x-goog-version"] = "v1"
	}
	return nil
}

// normalizeExpiration applies the service's rules for a subscription's
// expiration policy: without one, the subscription gets the default policy,
// a ttl of 31 days; a policy without a ttl never expires; a ttl is at least
// 1 day and, as the service documents, no shorter than the subscription's
// message retention. The fake reports the policy but never expires a
// subscription: no test runs for a day.
func normalizeExpiration(p *pubsubpb.Subscription, retention time.Duration) error {
	ep := p.GetExpirationPolicy()
	if ep == nil {
		p.ExpirationPolicy = &pubsubpb.ExpirationPolicy{Ttl: durationpb.New(defaultExpiration)}
		return nil
	}
	if ep.GetTtl() == nil {
		return nil
	}
	switch ttl := ep.GetTtl().AsDuration(); {
	case !ep.GetTtl().IsValid() || ttl < minExpiration:
		return invalid("expiration policy ttl %v is shorter than the minimum, %v", ttl, minExpiration)
	case ttl < retention:
		return invalid("expiration policy ttl %v is shorter than the message retention duration, %v", ttl, retention)
	}
	return nil
}

// streamAckDeadline turns a StreamingPull request's deadline into a
// duration. The service takes 10 to 600 s; the fake clamps rather than
// rejects, because the official client sends its MaxDurationPerAckExtension
// here, which may be shorter.
func streamAckDeadline(secs int32) time.Duration {
	secs = max(minAckDeadlineSecs, min(secs, maxAckDeadlineSecs))
	return time.Duration(secs) * time.Second
}

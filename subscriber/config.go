package subscriber

import (
	"fmt"
	"strings"
	"time"

	"cloud.google.com/go/pubsub/v2"

	"github.com/keyorder/keyorder/subscriber/internal/engine"
	"github.com/keyorder/keyorder/subscriber/internal/push"
)

// config holds the options' values, checked once, by newConfig: those
// the engine runs by, and the rest, which the facade's doors use.
type config struct {
	engine.Config
	exactlyOnce    bool
	quiet          time.Duration   // replay.go
	policies       servicePolicies // the service's, for a subscription created (policies.go)
	topicRetention time.Duration   // for a topic created; 0 for none (subscription.go)
	push           pushOptions     // push.go
	parking        string          // the parking topic; "" for none (parking.go)
	parkingWait    time.Duration   // internal/barrier
	parkingWaitSet bool            // WithParkingWait was given
}

func newConfig(opts []Option) (config, error) {
	c := config{
		Config: engine.Config{
			Partitions:     DefaultPartitions,
			KeyBacklog:     DefaultKeyBacklog,
			MaxAttempts:    DefaultMaxAttempts,
			MinBackoff:     DefaultMinBackoff,
			MaxBackoff:     DefaultMaxBackoff,
			DrainTimeout:   DefaultDrainTimeout,
			DedupWindow:    DefaultDedupWindow,
			RedeliveryWait: DefaultRedeliveryWait,
			Receive:        pubsub.DefaultReceiveSettings,
			SeqWindow:      DefaultSequenceWindow,
		},
		quiet:       DefaultQuietPeriod,
		parkingWait: DefaultParkingWait,
	}
	for i, opt := range opts {
		if opt == nil {
			return config{}, invalid("option %d of %d is nil", i+1, len(opts))
		}
		if err := opt(&c); err != nil {
			return config{}, err
		}
	}
	if c.Workers == 0 {
		c.Workers = followOutstanding(c.Receive.MaxOutstandingMessages)
	}
	if err := c.checkPush(); err != nil {
		return config{}, err
	}
	if err := c.checkParking(); err != nil {
		return config{}, err
	}
	return c, nil
}

// checkPush refuses push options that contradict each other, once all are
// known: each option alone cannot see the others.
func (c *config) checkPush() error {
	p := c.push
	switch {
	case p.email != "" && p.unauthenticated:
		return invalid("WithPushAuth(%q) with WithUnauthenticatedPush: the one checks every request's token, the other accepts requests without one; keep WithPushAuth, or drop it to accept unauthenticated pushes", p.email)
	case p.email != "" && !isEmail(p.email):
		return invalid("WithPushAuth(%q): not a service account's email (name@project.iam.gserviceaccount.com)", p.email)
	case p.endpoint == "":
		return nil
	case p.email == "" && !p.unauthenticated:
		return invalid("WithPush(%q) without WithPushAuth: anyone who knows the URL could deliver to it; add WithPushAuth, or WithUnauthenticatedPush if that is meant", p.endpoint)
	case c.exactlyOnce:
		return invalid("WithPush with WithExactlyOnceDelivery: the service delivers exactly once by pull only")
	}
	return nil
}

// checkPull refuses push options on the pull subscription name: they
// would describe requests that never come. Open takes WithPushAuth and
// WithUnauthenticatedPush without WithPush, for an existing push
// subscription, so this waits for the subscription.
func (c *config) checkPull(name string, have push.Settings) error {
	p := c.push
	if have.Endpoint != "" || p.endpoint != "" {
		return nil // a push subscription, or WithPush's own refusal
	}
	switch {
	case p.email != "":
		return invalid("WithPushAuth(%q): %s is a pull subscription, which gets no push requests; drop WithPushAuth, or add WithPush to create a push subscription", p.email, name)
	case p.unauthenticated:
		return invalid("WithUnauthenticatedPush: %s is a pull subscription, which gets no push requests; drop WithUnauthenticatedPush, or add WithPush to create a push subscription", name)
	case p.validator != nil:
		return invalid("WithTokenValidator: %s is a pull subscription, which gets no push requests; drop WithTokenValidator", name)
	}
	return nil
}

// isEmail reports whether s has the form of an email address: a name, an
// @ and a domain with a dot, and no spaces or controls.
func isEmail(s string) bool {
	name, domain, ok := strings.Cut(s, "@")
	return ok && name != "" && len(s) <= 254 && strings.Contains(domain, ".") &&
		!strings.HasPrefix(domain, ".") && !strings.HasSuffix(domain, ".") &&
		!strings.ContainsAny(domain, "@") && !strings.ContainsFunc(s, func(r rune) bool { return r <= ' ' || r == 0x7f })
}

// checkParking refuses parking options that do nothing, or break what
// WithParkingWait's doc asks: a drain that outlasts a park's wait.
func (c *config) checkParking() error {
	switch {
	case c.parking == "" && c.parkingWaitSet:
		return invalid("WithParkingWait(%v) without WithParking: the wait is parking's; add WithParking, or drop WithParkingWait", c.parkingWait)
	case c.parking != "" && c.DrainTimeout < c.parkingWait:
		return invalid("WithDrainTimeout(%v) with a parking wait of %v: a shutdown would cut a park's wait short; make the drain timeout at least the parking wait (WithDrainTimeout, WithParkingWait)", c.DrainTimeout, c.parkingWait)
	}
	return nil
}

// invalid returns an error matching [ErrInvalidConfig].
func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrInvalidConfig}, args...)...)
}

// checkLoops refuses options that would send a subscription's failures
// back to its own topic, topic: parked or dead-lettered there, a message
// would come back as a new one and fail again, without end.
func (c *config) checkLoops(client *pubsub.Client, topic string) error {
	if c.parking != "" && fullName(client, "topics", c.parking) == topic {
		return invalid("WithParking(%q): the parking topic is the subscription's own topic, %s: parked messages would come back to it", c.parking, topic)
	}
	if t := c.policies.deadLetterTopic; t != "" && fullName(client, "topics", t) == topic {
		return invalid("WithDeadLetterPolicy(%q): the dead-letter topic is the subscription's own topic, %s: dead letters would come back to it", t, topic)
	}
	return nil
}

// checked returns the Option that applies set if ok, and otherwise
// refuses with an error matching [ErrInvalidConfig], of format and args.
func checked(ok bool, set func(c *config), format string, args ...any) Option {
	return func(c *config) error {
		if !ok {
			return invalid(format, args...)
		}
		set(c)
		return nil
	}
}

// setting returns the Option that applies set, which refuses nothing.
func setting(set func(c *config)) Option {
	return func(c *config) error {
		set(c)
		return nil
	}
}

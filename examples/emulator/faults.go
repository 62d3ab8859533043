package main

import (
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/keyorder/keyorder/ordering/orderingtest"
)

// A faultSpec is one parsed -fault flag or control request:
//
//	KIND[,NAME=VALUE]...
//
// for example "break-streams,sub=orders-billing,every=10s" or
// "fail-publish,key=c-01,code=unavailable,times=3". Values may be
// percent-encoded (%2C for a comma). See the command's documentation for
// the kinds and names.
type faultSpec struct {
	text string // as given
	kind string

	match     orderingtest.Match // nil: every message
	key       string             // redeliver-key's key
	sub       string             // full name or ID; "": every subscription
	code      codes.Code
	failure   orderingtest.AckFailure
	times     int
	at, every time.Duration
	lifetime  time.Duration // "for": each fault is removed this long after it is made
}

// The kinds, each the name of a Server method in kebab case.
const (
	kindFailPublish  = "fail-publish"
	kindLoseResponse = "lose-publish-response"
	kindHoldPublish  = "hold-publish"
	kindDropAcks     = "drop-acks"
	kindFailAcks     = "fail-acks"
	kindDuplicate    = "duplicate-deliveries"
	kindRedeliverKey = "redeliver-key"
	kindBreakStreams = "break-streams"
)

// params lists the names each kind takes, besides at and every.
var params = map[string][]string{
	kindFailPublish:  {"key", "data", "code", "times", "for"},
	kindLoseResponse: {"key", "data", "code", "times", "for"},
	kindHoldPublish:  {"key", "data", "for"},
	kindDropAcks:     {"key", "data", "times", "for"},
	kindFailAcks:     {"key", "data", "failure", "times", "for"},
	kindDuplicate:    {"key", "data", "times", "for"},
	kindRedeliverKey: {"key", "sub"},
	kindBreakStreams: {"sub"},
}

var errBadFault = errors.New("bad fault")

// parseFault parses a fault spec. Defaults: every message, code
// unavailable, failure permanent, times 1, at 0, no repetition, no removal.
func parseFault(text string) (faultSpec, error) {
	fields := strings.Split(text, ",")
	f := faultSpec{text: text, kind: fields[0], code: codes.Unavailable, failure: orderingtest.PermanentAckFailure, times: 1}
	allowed, ok := params[f.kind]
	if !ok {
		return f, fmt.Errorf("%w %q: unknown kind %q", errBadFault, text, f.kind)
	}
	seen := map[string]bool{}
	for _, field := range fields[1:] {
		name, raw, ok := strings.Cut(field, "=")
		if !ok || seen[name] {
			return f, fmt.Errorf("%w %q: %q is not a new NAME=VALUE", errBadFault, text, field)
		}
		seen[name] = true
		value, err := url.PathUnescape(raw)
		if err == nil {
			err = f.set(name, value, allowed)
		}
		if err != nil {
			return f, fmt.Errorf("%w %q: %s: %v", errBadFault, text, name, err)
		}
	}
	switch {
	case seen["key"] && seen["data"]:
		return f, fmt.Errorf("%w %q: key and data exclude each other", errBadFault, text)
	case f.kind == kindRedeliverKey && !seen["key"]:
		return f, fmt.Errorf("%w %q: redeliver-key needs key", errBadFault, text)
	}
	return f, nil
}

// set applies one NAME=VALUE.
func (f *faultSpec) set(name, value string, allowed []string) error {
	var err error
	switch {
	case name == "at":
		f.at, err = duration(value)
		return err
	case name == "every":
		f.every, err = duration(value)
		if err == nil && f.every == 0 {
			err = errors.New("must be positive")
		}
		return err
	case !slices.Contains(allowed, name):
		return fmt.Errorf("not taken by %s", f.kind)
	}
	switch name {
	case "key":
		f.key, f.match = value, orderingtest.Key(value)
	case "data":
		f.match = orderingtest.Data(value)
	case "sub":
		f.sub = value
	case "code":
		name := `"` + strings.ToUpper(strings.ReplaceAll(value, "-", "_")) + `"`
		if err := f.code.UnmarshalJSON([]byte(name)); err != nil || f.code == codes.OK {
			return fmt.Errorf("unknown gRPC code %q", value)
		}
	case "failure":
		switch value {
		case "transient":
			f.failure = orderingtest.TransientAckFailure
		case "permanent":
			f.failure = orderingtest.PermanentAckFailure
		default:
			return fmt.Errorf("%q is neither transient nor permanent", value)
		}
	case "times":
		f.times, err = strconv.Atoi(value)
		if err == nil && f.times < 0 {
			err = errors.New("must be 0 (until removed) or more")
		}
	case "for":
		f.lifetime, err = duration(value)
		if err == nil && f.lifetime == 0 {
			err = errors.New("must be positive")
		}
	}
	return err
}

func duration(s string) (time.Duration, error) {
	d, err := time.ParseDuration(s)
	if err == nil && d < 0 {
		err = errors.New("must not be negative")
	}
	return d, err
}

// apply does what the spec says once. A fault kind returns the fault it
// made; redeliver-key and break-streams return how many messages they
// redelivered or streams they broke.
func (f faultSpec) apply(srv *orderingtest.Server) (*orderingtest.Fault, int) {
	match := f.match
	if match == nil {
		match = orderingtest.AnyMessage
	}
	times := f.times // 0: until removed, as the Server's methods take it
	switch f.kind {
	case kindFailPublish:
		return srv.FailPublish(match, f.code, times), 0
	case kindLoseResponse:
		return srv.LosePublishResponses(match, f.code, times), 0
	case kindHoldPublish:
		return srv.HoldPublish(match), 0
	case kindDropAcks:
		return srv.DropAcks(match, times), 0
	case kindFailAcks:
		return srv.FailAcks(match, f.failure, times), 0
	case kindDuplicate:
		return srv.DuplicateDeliveries(match, times), 0
	}
	n := 0
	for _, sub := range resolve(srv, f.sub) {
		switch f.kind {
		case kindRedeliverKey:
			m, _ := srv.RedeliverKey(sub, f.key) // an unordered subscription has no tails
			n += m
		case kindBreakStreams:
			n += srv.BreakStreams(sub)
		}
	}
	return nil, n
}

// resolve returns the subscriptions sub names: every one when sub is
// empty, a full name as given, and an ID in every project.
func resolve(srv *orderingtest.Server, sub string) []string {
	var out []string
	for _, name := range srv.Subscriptions() {
		if sub == "" || name == sub || strings.HasSuffix(name, "/subscriptions/"+sub) {
			out = append(out, name)
		}
	}
	return out
}

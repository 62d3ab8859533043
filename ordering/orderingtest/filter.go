package orderingtest

import (
	"strconv"
	"strings"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// maxFilterBytes is the service's limit on a subscription filter ("The
// maximum length of a filter is 256 bytes").
const maxFilterBytes = 256

// A filter is the part of the service's filter language the server models:
// conditions on attributes, joined by AND or by OR.
//
//	attributes.name = "value"   the attribute is present with this value
//	attributes:name             the attribute is present
//
// A name that is not made of letters, digits, '-' and '_' is written as a
// string literal, as on the service: attributes."a.b" = "x". A subscription
// with a filter receives only the messages that match it; the service
// acknowledges the others for it, so they are never delivered, counted or
// sought back. Parentheses, NOT, != and the functions (hasPrefix) are not
// modelled, nor is mixing AND with OR, which the service allows only with
// parentheses.
type filter struct {
	any   bool // joined by OR; by AND otherwise
	conds []condition
}

// A condition tests one attribute.
type condition struct {
	name, value string
	has         bool // attributes:name; otherwise attributes.name = value
}

// parseFilter parses a subscription's filter; "" is no filter. Syntax
// errors are InvalidArgument and the parts of the language the server does
// not model Unimplemented, so that a test learns which it hit.
func parseFilter(src string) (*filter, error) {
	if strings.TrimSpace(src) == "" {
		return nil, nil
	}
	if len(src) > maxFilterBytes {
		return nil, invalid("filter of %d bytes; the limit is %d", len(src), maxFilterBytes)
	}
	p := &filterParser{src: src}
	f := &filter{}
	for {
		c, err := p.condition()
		if err != nil {
			return nil, err
		}
		f.conds = append(f.conds, c)
		p.space()
		if p.done() {
			return f, nil
		}
		op := p.word()
		switch {
		case op != "AND" && op != "OR":
			return nil, p.unmodelled(op)
		case len(f.conds) > 1 && f.any != (op == "OR"):
			return nil, invalid("filter %q mixes AND and OR without parentheses", src)
		}
		f.any = op == "OR"
	}
}

// mustParseFilter parses a filter that normalizeSubscription accepted.
func mustParseFilter(src string) *filter {
	f, err := parseFilter(src)
	if err != nil {
		panic(err)
	}
	return f
}

// matches reports whether the message passes the filter.
func (f *filter) matches(m *pubsubpb.PubsubMessage) bool {
	if f == nil {
		return true
	}
	for _, c := range f.conds {
		v, ok := m.GetAttributes()[c.name]
		hit := ok && (c.has || v == c.value)
		if hit == f.any {
			return hit // the first true of an OR, the first false of an AND
		}
	}
	return !f.any
}

// filterParser reads a filter from left to right.
type filterParser struct {
	src string
	pos int
}

func (p *filterParser) done() bool { return p.pos >= len(p.src) }

func (p *filterParser) space() {
	for !p.done() && (p.src[p.pos] == ' ' || p.src[p.pos] == '\t' || p.src[p.pos] == '\n') {
		p.pos++
	}
}

// word reads a run of letters, digits, '-' and '_'.
func (p *filterParser) word() string {
	start := p.pos
	for !p.done() {
		c := p.src[p.pos]
		if !(c == '-' || c == '_' || c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z') {
			break
		}
		p.pos++
	}
	return p.src[start:p.pos]
}

// literal reads a double-quoted string literal with Go's escapes, which
// cover the service's.
func (p *filterParser) literal() (string, error) {
	if p.done() || p.src[p.pos] != '"' {
		return "", invalid("filter %q: want a string literal at byte %d", p.src, p.pos)
	}
	for end := p.pos + 1; end < len(p.src); end++ {
		switch p.src[end] {
		case '\\':
			end++
		case '"':
			s, err := strconv.Unquote(p.src[p.pos : end+1])
			if err != nil {
				return "", invalid("filter %q: bad string literal at byte %d", p.src, p.pos)
			}
			p.pos = end + 1
			return s, nil
		}
	}
	return "", invalid("filter %q: unterminated string literal", p.src)
}

// name reads an attribute name: a word or a string literal.
func (p *filterParser) name() (string, error) {
	if !p.done() && p.src[p.pos] == '"' {
		return p.literal()
	}
	if w := p.word(); w != "" {
		return w, nil
	}
	return "", invalid("filter %q: want an attribute name at byte %d", p.src, p.pos)
}

// condition reads attributes.name = "value" or attributes:name.
func (p *filterParser) condition() (condition, error) {
	p.space()
	if w := p.word(); w != "attributes" {
		return condition{}, p.unmodelled(w)
	}
	if p.done() {
		return condition{}, invalid("filter %q ends after attributes", p.src)
	}
	sep := p.src[p.pos]
	p.pos++
	name, err := p.name()
	if err != nil {
		return condition{}, err
	}
	if sep == ':' {
		return condition{name: name, has: true}, nil
	}
	if sep != '.' {
		return condition{}, invalid("filter %q: want . or : after attributes", p.src)
	}
	p.space()
	if strings.HasPrefix(p.src[p.pos:], "!=") {
		return condition{}, p.unmodelled("!=")
	}
	if p.done() || p.src[p.pos] != '=' {
		return condition{}, invalid("filter %q: want = after attributes.%s", p.src, name)
	}
	p.pos++
	p.space()
	value, err := p.literal()
	if err != nil {
		return condition{}, err
	}
	return condition{name: name, value: value}, nil
}

// unmodelled reports a part of the filter language the server does not
// model, or a syntax error where it is not a known word.
func (p *filterParser) unmodelled(word string) error {
	rest := p.src[p.pos:]
	switch {
	case word == "NOT" || word == "hasPrefix" || word == "!=" || strings.HasPrefix(word, "-") || strings.HasPrefix(rest, "("):
		return status.Errorf(codes.Unimplemented, "orderingtest: filter %q: only attributes.name = \"value\" and attributes:name, joined by AND or by OR, are modelled", p.src)
	case word == "" && rest == "":
		return invalid("filter %q ends too soon", p.src)
	case word == "":
		return invalid("filter %q: unexpected %q at byte %d", p.src, rest[:1], p.pos)
	}
	return invalid("filter %q: unexpected %q", p.src, word)
}

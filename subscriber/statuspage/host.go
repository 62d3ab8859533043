package statuspage

import (
	"net"
	"net/http"
	"strings"
)

// An Option configures a [Handler].
type Option func(*hosts)

// WithHosts adds names under which the page may be asked for, as the
// Host of a request: the names of the machine, or of a proxy in front,
// that an operator types. A name matches whatever its letter case and
// port; give it without a port. By default the page answers only for IP
// literals and "localhost" (and its subdomains), which a DNS name an
// attacker controls cannot be.
func WithHosts(names ...string) Option {
	return func(h *hosts) {
		for _, n := range names {
			h.names[strings.ToLower(strings.TrimSuffix(n, "."))] = true
		}
	}
}

// hosts are the names the page answers for, besides IP literals and
// localhost.
type hosts struct {
	names map[string]bool
}

// allows reports whether a request with the Host header host is for the
// page. A web page on another site the operator visits may point a DNS
// name of its own at the page's address (DNS rebinding) and read its
// JSON as same-origin; its requests then carry that name as Host, which
// no IP literal and no name the program gave is.
func (h *hosts) allows(host string) bool {
	name := host
	if n, _, err := net.SplitHostPort(host); err == nil {
		name = n
	}
	name = strings.ToLower(strings.TrimSuffix(strings.Trim(name, "[]"), "."))
	switch {
	case name == "":
		return false
	case net.ParseIP(name) != nil:
		return true
	case name == "localhost" || strings.HasSuffix(name, ".localhost"):
		return true // RFC 6761: always the loopback, never resolved elsewhere
	}
	return h.names[name]
}

// refuse answers a request for another host with 421 Misdirected
// Request: the page is not served under that name.
func refuse(w http.ResponseWriter) {
	http.Error(w, "misdirected request: this status page answers only for its own host names (statuspage.WithHosts)", http.StatusMisdirectedRequest)
}

package middleware

import (
	"net"
	"net/http"
	"net/netip"
	"strings"
)

// KeyFunc returns the client key of a request: the identity that gets its
// own bucket. It returns ErrNoKey (or another error) when the request has
// none; the request is then treated as a failed check (see
// Options.FailClosed).
type KeyFunc func(r *http.Request) (string, error)

// FromHeader returns a KeyFunc that keys by the value of the header name
// (such as an API key, or X-Real-IP behind nginx), spaces trimmed.
// A request without it has no key.
func FromHeader(name string) KeyFunc {
	return func(r *http.Request) (string, error) {
		if v := strings.TrimSpace(r.Header.Get(name)); v != "" {
			return v, nil
		}
		return "", ErrNoKey
	}
}

// Func adapts a function that returns the client key, "" meaning none.
func Func(f func(r *http.Request) string) KeyFunc {
	return func(r *http.Request) (string, error) {
		if k := f(r); k != "" {
			return k, nil
		}
		return "", ErrNoKey
	}
}

// ClientIP returns a KeyFunc that keys by the client's IP address.
//
// With trustedHops == 0 it is the address of the peer (Request.RemoteAddr),
// which is right when clients connect directly. Behind trustedHops reverse
// proxies that each append to X-Forwarded-For, it is the trustedHops-th
// address from the right of X-Forwarded-For: the one the outermost trusted
// proxy saw connecting. Addresses further left were written by the client
// and can be anything, which is why they are ignored; and trustedHops must
// be exactly the number of proxies in front of the server: one too many and
// every client can pick its key (and so its bucket) by sending
// X-Forwarded-For itself; one too few and all clients of a proxy share one
// bucket. With fewer addresses than trustedHops, the leftmost is used; with
// no usable address, the peer's.
func ClientIP(trustedHops int) KeyFunc {
	return func(r *http.Request) (string, error) {
		if trustedHops > 0 {
			if ip, ok := forwardedFor(r.Header.Values("X-Forwarded-For"), trustedHops); ok {
				return ip, nil
			}
		}
		if ip, ok := parseIP(r.RemoteAddr); ok {
			return ip, nil
		}
		return "", ErrNoKey
	}
}

// forwardedFor returns the hops-th address from the right of the
// X-Forwarded-For header lines, in order.
func forwardedFor(lines []string, hops int) (string, bool) {
	var addrs []string
	for _, l := range lines {
		for a := range strings.SplitSeq(l, ",") {
			if a = strings.TrimSpace(a); a != "" {
				addrs = append(addrs, a)
			}
		}
	}
	if len(addrs) == 0 {
		return "", false
	}
	return parseIP(addrs[max(len(addrs)-hops, 0)])
}

// parseIP returns the IP address of s ("1.2.3.4", "1.2.3.4:80", "::1",
// "[::1]:80") in canonical form, IPv4-mapped IPv6 addresses as IPv4.
func parseIP(s string) (string, bool) {
	if host, _, err := net.SplitHostPort(s); err == nil {
		s = host
	}
	a, err := netip.ParseAddr(s)
	if err != nil {
		return "", false
	}
	return a.Unmap().WithZone("").String(), true
}

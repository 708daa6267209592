// Package loopback tells whether a host or URL stays on this machine. Test
// tools (the test IdP), plain-http exceptions and insecure cookies are only
// allowed there.
package loopback

import (
	"net"
	"net/url"
	"strings"
)

// Host reports whether host (without port) is localhost or a loopback IP.
func Host(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// URL reports whether raw parses as a URL whose host is loopback.
func URL(raw string) bool {
	u, err := url.Parse(raw)
	return err == nil && Host(u.Hostname())
}

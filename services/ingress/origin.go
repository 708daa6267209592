package ingress

import (
	"net/url"
	"path"
	"strings"
)

// OriginAllowed reports whether a browser page's Origin may call the
// agents' doors: the broker's own origin (its configured public URL,
// never the request's Host, which a DNS-rebinding page sets to its own
// name) or one matching a pattern of allowed (path.Match syntax; a host
// pattern matches any scheme, one with "://" the scheme too).
func OriginAllowed(publicURL string, allowed []string, origin string) bool {
	u, err := url.Parse(origin)
	if err != nil || u.Host == "" || (u.Scheme != "https" && u.Scheme != "http") {
		return false
	}
	if own, err := url.Parse(publicURL); err == nil && own.Host != "" &&
		strings.EqualFold(u.Scheme, own.Scheme) && strings.EqualFold(u.Host, own.Host) {
		return true
	}
	for _, pat := range allowed {
		target := u.Host
		if strings.Contains(pat, "://") {
			target = u.Scheme + "://" + u.Host
		}
		if ok, _ := path.Match(strings.ToLower(pat), strings.ToLower(target)); ok {
			return true
		}
	}
	return false
}

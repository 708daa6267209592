package discovery

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/alpd-project/alpd/internal/loopback"
)

// maxRedirects is how many redirects on the same host a fetch follows
// (Matrix asks to follow them "but avoid loops"; three is plenty for a
// trailing-slash or http-to-https hop and bounds a loop).
const maxRedirects = 3

// fetcher GETs discovery documents within the fence the package doc
// describes.
type fetcher struct {
	cfg     Config
	resolve map[string]netip.AddrPort // lower-case host → loopback target
	client  *http.Client
}

func newFetcher(cfg Config) (*fetcher, error) {
	f := &fetcher{cfg: cfg, resolve: make(map[string]netip.AddrPort, len(cfg.Resolve))}
	for host, target := range cfg.Resolve {
		ap, err := netip.ParseAddrPort(target)
		if err != nil {
			return nil, fmt.Errorf("discovery: resolve %s: target %q is not ip:port: %w", host, target, err)
		}
		if !ap.Addr().Unmap().IsLoopback() {
			// The override exists for tests and one-machine setups; letting
			// it name any address would be a configured SSRF.
			return nil, fmt.Errorf("discovery: resolve %s: target %s is not a loopback address", host, target)
		}
		f.resolve[strings.ToLower(host)] = ap
	}
	tlsTransport := &http.Transport{
		Proxy:                  nil, // a proxy from the environment would dial for us, past the guard
		DialContext:            f.dial,
		TLSClientConfig:        &tls.Config{RootCAs: cfg.RootCAs, MinVersion: tls.VersionTLS12},
		ForceAttemptHTTP2:      true,
		TLSHandshakeTimeout:    cfg.HTTPTimeout,
		ResponseHeaderTimeout:  cfg.HTTPTimeout,
		MaxResponseHeaderBytes: 16 << 10,
		DisableCompression:     true,
		MaxIdleConnsPerHost:    2,
		IdleConnTimeout:        90 * time.Second,
	}
	st := &schemeTransport{https: tlsTransport}
	if cfg.AllowPlainHTTPLoopback {
		st.plain = &http.Transport{
			Proxy:                  nil,
			DialContext:            f.dialPlain,
			ResponseHeaderTimeout:  cfg.HTTPTimeout,
			MaxResponseHeaderBytes: 16 << 10,
			DisableCompression:     true,
			MaxIdleConnsPerHost:    2,
			IdleConnTimeout:        90 * time.Second,
		}
	}
	f.client = &http.Client{
		Transport:     st,
		Timeout:       cfg.HTTPTimeout,
		CheckRedirect: checkRedirect,
	}
	return f, nil
}

// schemeTransport sends https through the guarded TLS transport and plain
// http, when allowed at all, through a transport whose dialer reaches
// loopback addresses only.
type schemeTransport struct {
	https *http.Transport
	plain *http.Transport // nil unless AllowPlainHTTPLoopback
}

func (t *schemeTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	switch {
	case r.URL.Scheme == "https":
		return t.https.RoundTrip(r)
	case r.URL.Scheme == "http" && t.plain != nil:
		return t.plain.RoundTrip(r)
	}
	return nil, errorf(CodeForbiddenTarget, r.URL.String(), nil, "scheme %q is not https", r.URL.Scheme)
}

// checkRedirect keeps redirects on the original scheme and host: a
// domain's document must come from the domain itself, and a redirect to
// another host is how an SSRF or a hijacked path would reach elsewhere.
func checkRedirect(req *http.Request, via []*http.Request) error {
	first := via[0].URL
	if len(via) > maxRedirects {
		return errorf(CodeRedirect, first.String(), nil, "more than %d redirects", maxRedirects)
	}
	if req.URL.Scheme != first.Scheme || !strings.EqualFold(req.URL.Host, first.Host) {
		return errorf(CodeRedirect, first.String(), nil, "redirect to %s leaves %s://%s", req.URL.Redacted(), first.Scheme, first.Host)
	}
	return nil
}

// checkURL refuses a URL discovery must not fetch, before any dial.
func (f *fetcher) checkURL(raw string) (*url.URL, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return nil, errorf(CodeInvalid, raw, err, "not a URL")
	}
	if u.Host == "" || u.User != nil || u.Opaque != "" {
		return nil, errorf(CodeInvalid, raw, nil, "not an absolute URL with a host and no user info")
	}
	switch u.Scheme {
	case "https":
	case "http":
		if !f.cfg.AllowPlainHTTPLoopback || !f.loopbackTarget(u.Hostname()) {
			return nil, errorf(CodeForbiddenTarget, raw, nil, "plain http is allowed only to a loopback address, with allow_plain_http_loopback")
		}
	default:
		return nil, errorf(CodeForbiddenTarget, raw, nil, "scheme %q is not https", u.Scheme)
	}
	return u, nil
}

// loopbackTarget reports whether a connection to host stays on this
// machine: a loopback name or address, or a Resolve override (always
// loopback).
func (f *fetcher) loopbackTarget(host string) bool {
	if _, ok := f.resolve[strings.ToLower(host)]; ok {
		return true
	}
	return loopback.Host(host)
}

// dial connects to addr, or to its Resolve override, and checks the
// address actually dialled (after DNS) in the dialer's Control hook.
func (f *fetcher) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, fmt.Errorf("discovery: dial %s: %w", addr, err)
	}
	override, pinned := f.resolve[strings.ToLower(host)]
	if pinned {
		addr = override.String()
	}
	d := net.Dialer{Timeout: f.cfg.HTTPTimeout, Control: func(network, address string, _ syscall.RawConn) error {
		return f.checkDialled(network, address, pinned)
	}}
	return d.DialContext(ctx, network, addr)
}

// dialPlain dials for plain http, which may reach this machine only.
func (f *fetcher) dialPlain(ctx context.Context, network, addr string) (net.Conn, error) {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, fmt.Errorf("discovery: dial %s: %w", addr, err)
	}
	if override, ok := f.resolve[strings.ToLower(host)]; ok {
		addr = override.String()
	}
	d := net.Dialer{Timeout: f.cfg.HTTPTimeout, Control: func(_, address string, _ syscall.RawConn) error {
		ap, err := netip.ParseAddrPort(address)
		if err != nil || !ap.Addr().Unmap().IsLoopback() {
			return errorf(CodeForbiddenTarget, "", err, "plain http to %s refused: not a loopback address", address)
		}
		return nil
	}}
	return d.DialContext(ctx, network, addr)
}

// checkDialled is the SSRF guard. pinned: the dial follows a Resolve
// override, whose loopback target the operator named.
func (f *fetcher) checkDialled(network, address string, pinned bool) error {
	if network != "tcp4" && network != "tcp6" {
		return errorf(CodeForbiddenTarget, "", nil, "network %s refused", network)
	}
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		return errorf(CodeForbiddenTarget, "", err, "address %s refused", address)
	}
	a := ap.Addr().Unmap()
	switch {
	case f.cfg.AllowPrivate:
		return nil
	case a.IsLoopback() && (pinned || f.cfg.AllowPlainHTTPLoopback):
		// The dev flag means every broker of the setup is on this machine.
		return nil
	case forbiddenAddr(a):
		return errorf(CodeForbiddenTarget, "", nil, "address %s is private, loopback, link-local, multicast or unspecified", a)
	}
	return nil
}

// specialPrefixes are IPv4 and IPv6 ranges beyond netip's predicates that
// no public broker lives in (RFC 6890 special-purpose registries): a
// request there reaches this network's own machines or nowhere.
var specialPrefixes = []netip.Prefix{
	netip.MustParsePrefix("0.0.0.0/8"),       // "this network"
	netip.MustParsePrefix("100.64.0.0/10"),   // carrier-grade NAT
	netip.MustParsePrefix("192.0.0.0/24"),    // IETF protocol assignments
	netip.MustParsePrefix("198.18.0.0/15"),   // benchmarking
	netip.MustParsePrefix("240.0.0.0/4"),     // reserved, and broadcast
	netip.MustParsePrefix("64:ff9b:1::/48"),  // local-use NAT64
	netip.MustParsePrefix("2001:db8::/32"),   // documentation
	netip.MustParsePrefix("fec0::/10"),       // deprecated site-local
	netip.MustParsePrefix("100::/64"),        // discard-only
	netip.MustParsePrefix("2001::/23"),       // IETF protocol assignments (Teredo, ORCHID, …)
	netip.MustParsePrefix("2002::/16"),       // 6to4, which embeds any IPv4 address
	netip.MustParsePrefix("::/96"),           // IPv4-compatible (deprecated)
	netip.MustParsePrefix("192.88.99.0/24"),  // 6to4 relay anycast
	netip.MustParsePrefix("198.51.100.0/24"), // documentation
	netip.MustParsePrefix("203.0.113.0/24"),  // documentation
	netip.MustParsePrefix("192.0.2.0/24"),    // documentation
}

var nat64 = netip.MustParsePrefix("64:ff9b::/96")

func forbiddenAddr(a netip.Addr) bool {
	if nat64.Contains(a) {
		// Well-known NAT64 carries an IPv4 address in its last 32 bits:
		// judge that one.
		b := a.As16()
		return forbiddenAddr(netip.AddrFrom4([4]byte{b[12], b[13], b[14], b[15]}))
	}
	if !a.IsValid() || a.IsUnspecified() || a.IsLoopback() || a.IsPrivate() || a.IsLinkLocalUnicast() ||
		a.IsLinkLocalMulticast() || a.IsInterfaceLocalMulticast() || a.IsMulticast() {
		return true
	}
	for _, p := range specialPrefixes {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// answer is a fetched document.
type answer struct {
	body   []byte
	header http.Header
}

// get fetches raw (already checked with checkURL) within the limits.
func (f *fetcher) get(ctx context.Context, u *url.URL) (answer, error) {
	raw := u.String()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, raw, nil)
	if err != nil {
		return answer{}, errorf(CodeInvalid, raw, err, "bad request URL")
	}
	req.Header.Set("Accept", "application/json")
	req.Header.Set("User-Agent", "alpd-discovery")
	resp, err := f.client.Do(req)
	if err != nil {
		var de *Error
		if errors.As(err, &de) {
			if de.URL == "" {
				de.URL = raw
			}
			return answer{}, de
		}
		return answer{}, errorf(CodeUnreachable, raw, err, "no answer")
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		e := errorf(CodeUnreachable, raw, nil, "answered %d %s", resp.StatusCode, http.StatusText(resp.StatusCode))
		e.Status = resp.StatusCode
		return answer{}, e
	}
	if resp.ContentLength > f.cfg.MaxBytes {
		return answer{}, errorf(CodeTooLarge, raw, nil, "answer of %d bytes is over the limit of %d", resp.ContentLength, f.cfg.MaxBytes)
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, f.cfg.MaxBytes+1))
	if err != nil {
		return answer{}, errorf(CodeUnreachable, raw, err, "answer cut short")
	}
	if int64(len(body)) > f.cfg.MaxBytes {
		return answer{}, errorf(CodeTooLarge, raw, nil, "answer is over the limit of %d bytes", f.cfg.MaxBytes)
	}
	return answer{body: body, header: resp.Header}, nil
}

// cacheControlMaxAge reads how long an answer may be kept from its
// Cache-Control header: max-age, or 0 for no-store and no-cache; ok is
// false when the header says neither.
func cacheControlMaxAge(h http.Header) (d time.Duration, ok bool) {
	for _, line := range h.Values("Cache-Control") {
		for dir := range strings.SplitSeq(line, ",") {
			name, val, _ := strings.Cut(strings.TrimSpace(dir), "=")
			switch strings.ToLower(name) {
			case "no-store", "no-cache":
				return 0, true
			case "max-age":
				n, err := strconv.ParseInt(strings.Trim(val, `"`), 10, 64)
				if err != nil || n < 0 {
					continue
				}
				if n > int64(1<<62)/int64(time.Second) {
					n = int64(1<<62) / int64(time.Second)
				}
				d, ok = time.Duration(n)*time.Second, true
			}
		}
	}
	return d, ok
}

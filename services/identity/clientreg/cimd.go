package clientreg

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"time"

	alpv1 "github.com/alpd-project/alpd/gen/alp/v1"
	"github.com/alpd-project/alpd/internal/identitystore"
)

// ClientSource finds the OAuth client of a tenant by client id (the same
// interface as services/identity/oauthas's).
type ClientSource interface {
	Client(ctx context.Context, tenant, clientID string) (identitystore.Client, error)
}

// StoreClients is a ClientSource of registered clients only.
type StoreClients struct{ Store *identitystore.Store }

// Client is Store.Client.
func (s StoreClients) Client(_ context.Context, tenant, clientID string) (identitystore.Client, error) {
	return s.Store.Client(tenant, clientID)
}

// Errors of CIMDSource. Each error it returns for a URL client id wraps
// one of ErrInvalidClientMetadata and ErrClientUnreachable, and the message
// says what was wrong; errors of the store (ErrNotHosted …) pass through.
var (
	// ErrInvalidClientMetadata: the client id URL or its document is not
	// acceptable.
	ErrInvalidClientMetadata = errors.New("clientreg: invalid client metadata")
	// ErrClientUnreachable: the document could not be fetched (network,
	// timeout, status, redirect, refused address).
	ErrClientUnreachable = errors.New("clientreg: client metadata document unreachable")
	// ErrAddressNotAllowed (with ErrClientUnreachable): the document's host
	// resolves to an address that is not public (SSRF guard).
	ErrAddressNotAllowed = errors.New("clientreg: address not allowed")
)

// CIMDSource defaults.
const (
	DefaultCIMDMaxBytes      = 16 << 10
	DefaultCIMDTimeout       = 5 * time.Second
	DefaultCIMDCacheTTL      = 5 * time.Minute
	DefaultCIMDCacheCapacity = 1024
)

// Resolver resolves host names (*net.Resolver).
type Resolver interface {
	LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error)
}

// CIMDSource is a ClientSource that understands Client ID Metadata
// Documents: a client id that is an https URL is the address of the
// client's metadata, which is fetched, checked and registered as a
// PUBLIC_CIMD client on first use. Other client ids go to Next (or to
// the store when Next is nil). Set the fields before the first use; it is
// safe for concurrent use after that.
type CIMDSource struct {
	// Store records the clients. Required.
	Store *identitystore.Store
	// Next answers for client ids that are not URLs; nil means Store.
	Next ClientSource
	// HTTPClient fetches documents. Its Transport must be nil or an
	// *http.Transport: it is cloned, loses any proxy and dials through the
	// address guard. Redirects are never followed. Default: a plain
	// transport.
	HTTPClient *http.Client
	// Resolver resolves document hosts; default net.DefaultResolver.
	Resolver Resolver
	// AllowHTTPLoopback lets documents live on loopback addresses, and
	// (only there) be served over plain http. TESTS ONLY. Note that
	// identitystore registers https client ids only.
	AllowHTTPLoopback bool
	// MaxBytes bounds a document (default 16 KiB).
	MaxBytes int64
	// Timeout bounds a fetch (default 5s).
	Timeout time.Duration
	// CacheTTL is how long a fetched document is trusted (default 5m;
	// negative: never cached).
	CacheTTL time.Duration
	// CacheCapacity bounds the cached documents (default 1024).
	CacheCapacity int
	// Logger; nil discards.
	Logger *slog.Logger

	once    sync.Once
	initErr error
	client  *http.Client
	log     *slog.Logger

	mu       sync.Mutex
	cache    map[string]cachedDoc
	inflight map[string]*fetchCall
}

type cachedDoc struct {
	md      checked
	fetched time.Time
}

type fetchCall struct {
	done chan struct{}
	md   checked
	err  error
}

// metadataDocument is a Client ID Metadata Document.
type metadataDocument struct {
	ClientID string `json:"client_id"`
	publicMetadata
	ClientSecret          *json.RawMessage `json:"client_secret"`
	ClientSecretExpiresAt *json.RawMessage `json:"client_secret_expires_at"`
}

func (s *CIMDSource) init() error {
	s.once.Do(func() {
		if s.Store == nil {
			s.initErr = errors.New("clientreg: CIMDSource.Store is required")
			return
		}
		if s.MaxBytes <= 0 {
			s.MaxBytes = DefaultCIMDMaxBytes
		}
		if s.Timeout <= 0 {
			s.Timeout = DefaultCIMDTimeout
		}
		if s.CacheTTL == 0 {
			s.CacheTTL = DefaultCIMDCacheTTL
		}
		if s.CacheCapacity <= 0 {
			s.CacheCapacity = DefaultCIMDCacheCapacity
		}
		s.log = s.Logger
		if s.log == nil {
			s.log = slog.New(slog.DiscardHandler)
		}
		resolver := s.Resolver
		if resolver == nil {
			resolver = net.DefaultResolver
		}
		var base *http.Transport
		var c http.Client
		if s.HTTPClient != nil {
			c = *s.HTTPClient
			switch t := s.HTTPClient.Transport.(type) {
			case nil:
			case *http.Transport:
				base = t
			default:
				s.initErr = fmt.Errorf("clientreg: CIMDSource.HTTPClient.Transport must be nil or *http.Transport, not %T (the address guard needs its dialer)", t)
				return
			}
		}
		var tr *http.Transport
		if base != nil {
			tr = base.Clone()
		} else {
			tr = http.DefaultTransport.(*http.Transport).Clone()
		}
		g := &guard{resolver: resolver, allowLoopback: s.AllowHTTPLoopback, timeout: s.Timeout}
		tr.Proxy = nil
		tr.DialContext = g.dialContext
		tr.DialTLSContext = nil
		tr.MaxResponseHeaderBytes = 16 << 10
		tr.ResponseHeaderTimeout = s.Timeout
		c.Transport = tr
		c.Timeout = s.Timeout
		c.Jar = nil
		c.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
		s.client = &c
		s.cache = map[string]cachedDoc{}
		s.inflight = map[string]*fetchCall{}
	})
	return s.initErr
}

// IsURLClientID reports whether clientID is meant as a metadata document
// URL (it starts with https:// or http://, in any case).
func IsURLClientID(clientID string) bool {
	l := strings.ToLower(clientID)
	return strings.HasPrefix(l, "https://") || strings.HasPrefix(l, "http://")
}

// Client returns the client with the id. For a URL id it fetches (or takes
// from the cache) the metadata document and checks it; the first time, it
// registers the client. A URL id that an admin registered under another
// kind is returned as registered, without fetching.
func (s *CIMDSource) Client(ctx context.Context, tenant, clientID string) (identitystore.Client, error) {
	if err := s.init(); err != nil {
		return identitystore.Client{}, err
	}
	if !IsURLClientID(clientID) {
		if s.Next != nil {
			return s.Next.Client(ctx, tenant, clientID)
		}
		return s.Store.Client(tenant, clientID)
	}
	if err := s.checkClientIDURL(clientID); err != nil {
		return identitystore.Client{}, err
	}
	stored, err := s.Store.Client(tenant, clientID)
	switch {
	case err == nil && stored.Kind != alpv1.ClientKind_CLIENT_KIND_PUBLIC_CIMD:
		return stored, nil
	case err != nil && !errors.Is(err, identitystore.ErrNotFound):
		return identitystore.Client{}, err
	}
	found := err == nil
	md, err := s.document(ctx, clientID)
	if err != nil {
		return identitystore.Client{}, err
	}
	if !found {
		c, err := s.Store.RegisterClient(ctx, identitystore.ClientSpec{
			Tenant:       tenant,
			ClientID:     clientID,
			Kind:         alpv1.ClientKind_CLIENT_KIND_PUBLIC_CIMD,
			RedirectURIs: md.RedirectURIs,
			Name:         md.ClientName,
			RegisteredBy: identitystore.RegisteredByCIMD,
		})
		switch {
		case err == nil:
			s.log.InfoContext(ctx, "client registered from its metadata document", "tenant", tenant, "client_id", clientID)
			return c, nil
		case errors.Is(err, identitystore.ErrInvalid):
			return identitystore.Client{}, fmt.Errorf("%w: %s: not registrable: %s", ErrInvalidClientMetadata, clientID, trimStorePrefix(err))
		case !errors.Is(err, identitystore.ErrExists):
			return identitystore.Client{}, err
		}
		// Registered meanwhile (another request or replica).
		if stored, err = s.Store.Client(tenant, clientID); err != nil {
			return identitystore.Client{}, err
		}
		if stored.Kind != alpv1.ClientKind_CLIENT_KIND_PUBLIC_CIMD {
			return stored, nil
		}
	}
	if !sameSet(stored.RedirectURIs, md.RedirectURIs) {
		return identitystore.Client{}, fmt.Errorf("%w: %s: the document's redirect_uris changed since the client was registered; registered clients cannot be updated", ErrInvalidClientMetadata, clientID)
	}
	return stored, nil
}

// checkClientIDURL: an https URL with a path (http only on loopback when
// allowed), no fragment, user information or dot segments.
func (s *CIMDSource) checkClientIDURL(clientID string) error {
	u, host, err := parseWebURL(clientID)
	if err != nil {
		return fmt.Errorf("%w: client_id URL: %v", ErrInvalidClientMetadata, err)
	}
	if u.Scheme == "http" && !(s.AllowHTTPLoopback && isLoopbackHost(host)) {
		return fmt.Errorf("%w: client_id URL: must be https", ErrInvalidClientMetadata)
	}
	if len(u.EscapedPath()) < 2 {
		return fmt.Errorf("%w: client_id URL: must have a path (e.g. https://app.example/client.json)", ErrInvalidClientMetadata)
	}
	for _, seg := range strings.Split(u.EscapedPath(), "/") {
		if seg == "." || seg == ".." || strings.EqualFold(seg, "%2e") || strings.EqualFold(seg, "%2e%2e") || strings.EqualFold(seg, ".%2e") || strings.EqualFold(seg, "%2e.") {
			return fmt.Errorf("%w: client_id URL: must not contain dot segments", ErrInvalidClientMetadata)
		}
	}
	return nil
}

// document returns the checked metadata at clientID, from the cache or
// fetched; concurrent requests for one URL share a fetch.
func (s *CIMDSource) document(ctx context.Context, clientID string) (checked, error) {
	now := time.Now()
	s.mu.Lock()
	if d, ok := s.cache[clientID]; ok && now.Sub(d.fetched) < s.CacheTTL {
		s.mu.Unlock()
		return d.md, nil
	}
	call := s.inflight[clientID]
	if call == nil {
		call = &fetchCall{done: make(chan struct{})}
		s.inflight[clientID] = call
		go s.runFetch(context.WithoutCancel(ctx), clientID, call)
	}
	s.mu.Unlock()
	select {
	case <-call.done:
		return call.md, call.err
	case <-ctx.Done():
		return checked{}, fmt.Errorf("%w: %s: %v", ErrClientUnreachable, clientID, ctx.Err())
	}
}

func (s *CIMDSource) runFetch(ctx context.Context, clientID string, call *fetchCall) {
	call.md, call.err = s.fetch(ctx, clientID)
	s.mu.Lock()
	delete(s.inflight, clientID)
	if call.err == nil && s.CacheTTL > 0 {
		now := time.Now()
		if len(s.cache) >= s.CacheCapacity {
			for k, d := range s.cache {
				if now.Sub(d.fetched) >= s.CacheTTL {
					delete(s.cache, k)
				}
			}
			for k := range s.cache { // still full: drop any
				if len(s.cache) < s.CacheCapacity {
					break
				}
				delete(s.cache, k)
			}
		}
		s.cache[clientID] = cachedDoc{md: call.md, fetched: now}
	}
	s.mu.Unlock()
	close(call.done)
}

// fetch gets and checks the document at clientID.
func (s *CIMDSource) fetch(ctx context.Context, clientID string) (checked, error) {
	unreachable := func(format string, a ...any) error {
		return fmt.Errorf("%w: %s: %s", ErrClientUnreachable, clientID, fmt.Sprintf(format, a...))
	}
	invalid := func(format string, a ...any) error {
		return fmt.Errorf("%w: %s: %s", ErrInvalidClientMetadata, clientID, fmt.Sprintf(format, a...))
	}
	ctx, cancel := context.WithTimeout(ctx, s.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, clientID, nil)
	if err != nil {
		return checked{}, invalid("not a URL")
	}
	req.Header.Set("Accept", "application/json")
	req.Header.Set("User-Agent", "alpd-client-metadata/1")
	resp, err := s.client.Do(req)
	if err != nil {
		var refused *refusedAddress
		if errors.As(err, &refused) {
			return checked{}, fmt.Errorf("%w: %s: %w", ErrClientUnreachable, clientID, refused)
		}
		if errors.Is(err, context.DeadlineExceeded) || isTimeout(err) {
			return checked{}, unreachable("no answer within %v", s.Timeout)
		}
		return checked{}, unreachable("fetch failed: %v", unwrapURLError(err))
	}
	defer resp.Body.Close()
	switch {
	case resp.StatusCode >= 300 && resp.StatusCode < 400:
		return checked{}, unreachable("answered %d (a redirect, which is not followed: the document must be at its client_id)", resp.StatusCode)
	case resp.StatusCode != http.StatusOK:
		return checked{}, unreachable("answered %d, want 200", resp.StatusCode)
	}
	mt, params, err := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	if err != nil || mt != "application/json" {
		return checked{}, invalid("Content-Type %q, want application/json", truncate(resp.Header.Get("Content-Type"), 64))
	}
	if cs, ok := params["charset"]; ok && !strings.EqualFold(cs, "utf-8") {
		return checked{}, invalid("charset %q, want utf-8", truncate(cs, 32))
	}
	if resp.ContentLength > s.MaxBytes {
		return checked{}, invalid("document of %d bytes is larger than %d bytes", resp.ContentLength, s.MaxBytes)
	}
	data, err := io.ReadAll(io.LimitReader(resp.Body, s.MaxBytes+1))
	// When the deadline cuts the connection, the read can end with a clean
	// EOF on a truncated body: the deadline, not the bytes, decides.
	if err == nil && ctx.Err() != nil {
		err = ctx.Err()
	}
	if err != nil {
		if errors.Is(err, context.DeadlineExceeded) || isTimeout(err) {
			return checked{}, unreachable("no complete answer within %v", s.Timeout)
		}
		return checked{}, unreachable("reading the document: %v", err)
	}
	if int64(len(data)) > s.MaxBytes {
		return checked{}, invalid("document larger than %d bytes", s.MaxBytes)
	}
	data = bytes.TrimSpace(data)
	if len(data) == 0 || data[0] != '{' {
		return checked{}, invalid("not a JSON object")
	}
	var doc metadataDocument
	dec := json.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&doc); err != nil {
		return checked{}, invalid("not valid JSON: %s", jsonProblem(err))
	}
	if _, err := dec.Token(); err != io.EOF {
		return checked{}, invalid("not valid JSON: data after the object")
	}
	switch {
	case doc.ClientID != clientID:
		return checked{}, invalid("the document's client_id %q is not its URL", truncate(doc.ClientID, 256))
	case doc.ClientSecret != nil || doc.ClientSecretExpiresAt != nil:
		return checked{}, invalid("a client metadata document must not carry client_secret")
	}
	md, merr := doc.publicMetadata.check()
	if merr != nil {
		return checked{}, invalid("%s", merr.desc)
	}
	return md, nil
}

func unwrapURLError(err error) error {
	var ue interface{ Unwrap() error }
	if errors.As(err, &ue) {
		if inner := ue.Unwrap(); inner != nil {
			return inner
		}
	}
	return err
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// guard dials only public addresses (and loopback ones when allowed): it
// resolves the host once, refuses if any address is not allowed, and
// connects to a checked address.
type guard struct {
	resolver      Resolver
	allowLoopback bool
	timeout       time.Duration
}

func (g *guard) dialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	host, portStr, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, err
	}
	port, err := strconv.ParseUint(portStr, 10, 16)
	if err != nil {
		return nil, fmt.Errorf("clientreg: bad port %q", portStr)
	}
	var ips []netip.Addr
	if ip, err := netip.ParseAddr(host); err == nil {
		ips = []netip.Addr{ip}
	} else {
		ips, err = g.resolver.LookupNetIP(ctx, "ip", host)
		if err != nil {
			return nil, err
		}
		if len(ips) == 0 {
			return nil, fmt.Errorf("clientreg: %s has no addresses", host)
		}
	}
	for _, ip := range ips {
		if !g.allowed(ip) {
			return nil, &refusedAddress{host: host, ip: ip}
		}
	}
	d := net.Dialer{Timeout: g.timeout}
	var last error
	for _, ip := range ips {
		c, err := d.DialContext(ctx, network, netip.AddrPortFrom(ip.Unmap(), uint16(port)).String())
		if err == nil {
			return c, nil
		}
		last = err
	}
	return nil, last
}

// refusedAddress is the guard's refusal; it matches ErrAddressNotAllowed.
type refusedAddress struct {
	host string
	ip   netip.Addr
}

func (e *refusedAddress) Error() string {
	return fmt.Sprintf("%v: %s resolves to %s, which is not a public address", ErrAddressNotAllowed, e.host, e.ip)
}

func (e *refusedAddress) Unwrap() error { return ErrAddressNotAllowed }

func (g *guard) allowed(ip netip.Addr) bool {
	ip = ip.Unmap()
	if g.allowLoopback && ip.IsLoopback() {
		return true
	}
	return PublicAddress(ip)
}

// nonPublic are ranges, beyond the ones netip classifies, that no client
// metadata document lives at: shared, reserved, benchmarking, documentation
// and translation ranges (which can reach private IPv4 addresses).
var nonPublic = []netip.Prefix{
	netip.MustParsePrefix("0.0.0.0/8"),
	netip.MustParsePrefix("100.64.0.0/10"),
	netip.MustParsePrefix("192.0.0.0/24"),
	netip.MustParsePrefix("192.0.2.0/24"),
	netip.MustParsePrefix("198.18.0.0/15"),
	netip.MustParsePrefix("198.51.100.0/24"),
	netip.MustParsePrefix("203.0.113.0/24"),
	netip.MustParsePrefix("240.0.0.0/4"),
	netip.MustParsePrefix("64:ff9b::/96"),
	netip.MustParsePrefix("64:ff9b:1::/48"),
	netip.MustParsePrefix("100::/64"),
	netip.MustParsePrefix("2001::/32"),
	netip.MustParsePrefix("2001:db8::/32"),
	netip.MustParsePrefix("2002::/16"),
	netip.MustParsePrefix("fec0::/10"),
}

// PublicAddress reports whether ip is a public unicast address: not
// loopback, private, link-local, multicast, unspecified or reserved.
func PublicAddress(ip netip.Addr) bool {
	ip = ip.Unmap()
	if !ip.IsValid() || ip.IsUnspecified() || ip.IsLoopback() || ip.IsPrivate() ||
		ip.IsLinkLocalUnicast() || ip.IsLinkLocalMulticast() || ip.IsInterfaceLocalMulticast() || ip.IsMulticast() {
		return false
	}
	for _, p := range nonPublic {
		if p.Contains(ip) {
			return false
		}
	}
	return true
}

package discovery

import (
	"context"
	"crypto/x509"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"

	"golang.org/x/sync/singleflight"

	"github.com/alpd-project/alpd/internal/alp"
	"github.com/alpd-project/alpd/internal/alpwire"
)

// Paths of the discovery documents, under a domain and a broker URL.
const (
	DomainDocPath  = "/.well-known/alp"
	BrokerKeysPath = "/.well-known/alp/broker"
)

// Config configures a Resolver; zero fields take the defaults named.
type Config struct {
	// HTTPTimeout bounds one fetch, connection to last byte (5s).
	HTTPTimeout time.Duration
	// MaxBytes bounds one answer's body (64 KiB).
	MaxBytes int64
	// DefaultMaxAge is how long a document is cached when neither its
	// Cache-Control nor its max_age says (24h).
	DefaultMaxAge time.Duration
	// MaxMaxAge caps every cache lifetime (48h).
	MaxMaxAge time.Duration
	// MinMaxAge is the shortest a DomainDoc is cached even if it says
	// no-store or max-age=0 (1 min): one lookup per message would let a
	// domain make this broker fetch on its behalf at will.
	MinMaxAge time.Duration
	// ErrorBackoff is how long the first failure in a row is cached (1
	// min); each further failure doubles it, up to ErrorTTL (1h).
	ErrorBackoff time.Duration
	ErrorTTL     time.Duration
	// RefreshInterval is the least time between two fetches of one
	// broker's keys that Refresh makes (1 min).
	RefreshInterval time.Duration
	// AllowPlainHTTPLoopback allows plain http to loopback targets (and
	// loopback targets at all): the dev flag for brokers on one machine.
	AllowPlainHTTPLoopback bool
	// AllowPrivate lets the dial guard pass private, loopback and
	// link-local addresses (tests only).
	AllowPrivate bool
	// Resolve pins hosts to loopback "ip:port" targets, like curl
	// --resolve; TLS still verifies the original host name.
	Resolve map[string]string
	// RootCAs, if set, replaces the system roots (the test CA).
	RootCAs *x509.CertPool
	// Now is the clock (time.Now).
	Now    func() time.Time
	Logger *slog.Logger
}

func (c Config) withDefaults() Config {
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	def(&c.HTTPTimeout, 5*time.Second)
	def(&c.DefaultMaxAge, 24*time.Hour)
	def(&c.MaxMaxAge, 48*time.Hour)
	def(&c.MinMaxAge, time.Minute)
	def(&c.ErrorBackoff, time.Minute)
	def(&c.ErrorTTL, time.Hour)
	def(&c.RefreshInterval, time.Minute)
	if c.MaxBytes <= 0 {
		c.MaxBytes = 64 << 10
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c
}

// Resolver looks up home brokers and broker keys, with a cache. It is safe
// for concurrent use.
type Resolver struct {
	cfg   Config
	fetch *fetcher
	group singleflight.Group

	mu      sync.Mutex
	domains map[string]*cached[alpwire.DomainDoc]
	brokers map[string]*cached[*alpwire.BrokerKeys] // by broker name
}

// cached is one cache entry: a value or an error, until expires.
type cached[T any] struct {
	val      T
	err      *Error
	url      string    // what was fetched (a broker's keys are cached for one URL)
	fetched  time.Time // when the answer (or failure) came
	expires  time.Time
	failures int // failures in a row, for the backoff
}

// New builds a Resolver. It fails on a Resolve entry that is not a
// loopback ip:port.
func New(cfg Config) (*Resolver, error) {
	cfg = cfg.withDefaults()
	f, err := newFetcher(cfg)
	if err != nil {
		return nil, err
	}
	return &Resolver{cfg: cfg, fetch: f,
		domains: map[string]*cached[alpwire.DomainDoc]{},
		brokers: map[string]*cached[*alpwire.BrokerKeys]{}}, nil
}

// HomeBroker returns the DomainDoc of domain: which broker is its home.
func (r *Resolver) HomeBroker(ctx context.Context, domain string) (alpwire.DomainDoc, error) {
	if err := alp.ValidateTenant(domain); err != nil {
		return alpwire.DomainDoc{}, errorf(CodeInvalid, "", err, "%q is not a domain", domain)
	}
	r.mu.Lock()
	e := r.domains[domain]
	r.mu.Unlock()
	if v, err, ok := fresh(r, e); ok {
		return v, err
	}
	v, err := share(ctx, &r.group, "domain "+domain, func(ctx context.Context) (*cached[alpwire.DomainDoc], error) {
		return r.fetchDomain(ctx, domain), nil
	})
	if err != nil {
		return alpwire.DomainDoc{}, err
	}
	if v.err != nil {
		return alpwire.DomainDoc{}, cachedErr(v)
	}
	return v.val, nil
}

// domainURL is where domain's DomainDoc lives: https, or plain http when
// the dev flag is on and the domain is pinned to (or is) a loopback target.
func (r *Resolver) domainURL(domain string) string {
	scheme := "https"
	if r.cfg.AllowPlainHTTPLoopback && r.fetch.loopbackTarget(domain) {
		scheme = "http"
	}
	return scheme + "://" + domain + DomainDocPath
}

func (r *Resolver) fetchDomain(ctx context.Context, domain string) *cached[alpwire.DomainDoc] {
	raw := r.domainURL(domain)
	doc, ttl, derr := r.getDomain(ctx, raw, domain)
	r.mu.Lock()
	defer r.mu.Unlock()
	e := settle(r, r.domains[domain], raw, ttl, derr)
	if derr == nil {
		e.val = doc
	}
	r.domains[domain] = e
	return e
}

func (r *Resolver) getDomain(ctx context.Context, raw, domain string) (alpwire.DomainDoc, time.Duration, *Error) {
	u, err := r.fetch.checkURL(raw)
	if err != nil {
		return alpwire.DomainDoc{}, 0, asError(err)
	}
	ans, err := r.fetch.get(ctx, u)
	if err != nil {
		return alpwire.DomainDoc{}, 0, asError(err)
	}
	doc, err := alpwire.ParseDomainDoc(ans.body)
	if err != nil {
		return alpwire.DomainDoc{}, 0, errorf(CodeInvalid, raw, err, "not a valid DomainDoc")
	}
	if doc.Domain != domain {
		return alpwire.DomainDoc{}, 0, errorf(CodeInvalid, raw, nil, "the document is for %q", doc.Domain)
	}
	if _, err := r.fetch.checkURL(doc.BrokerURL); err != nil {
		return alpwire.DomainDoc{}, 0, errorf(CodeInvalid, raw, err, "broker_url %q may not be fetched", doc.BrokerURL)
	}
	ttl := r.cfg.DefaultMaxAge
	hdr, hok := cacheControlMaxAge(ans.header)
	switch {
	case hok && doc.MaxAge > 0:
		ttl = min(hdr, time.Duration(doc.MaxAge)*time.Second)
	case hok:
		ttl = hdr
	case doc.MaxAge > 0:
		ttl = time.Duration(doc.MaxAge) * time.Second
	}
	return *doc, min(max(ttl, r.cfg.MinMaxAge), r.cfg.MaxMaxAge), nil
}

// BrokerKeys returns the BrokerKeys of the broker named brokerName at
// brokerURL (from its DomainDoc), self-signature verified. They are cached
// until the soonest of valid_until_ts, 7 days, MaxMaxAge and the answer's
// Cache-Control max-age.
func (r *Resolver) BrokerKeys(ctx context.Context, brokerURL, brokerName string) (*alpwire.BrokerKeys, error) {
	e, err := r.brokerKeys(ctx, brokerURL, brokerName)
	if err != nil {
		return nil, err
	}
	return e.val, nil
}

func (r *Resolver) brokerKeys(ctx context.Context, brokerURL, brokerName string) (*cached[*alpwire.BrokerKeys], error) {
	if err := alp.ValidateTenant(brokerName); err != nil {
		return nil, errorf(CodeInvalid, "", err, "%q is not a broker name", brokerName)
	}
	base := strings.TrimRight(brokerURL, "/")
	r.mu.Lock()
	e := r.brokers[brokerName]
	r.mu.Unlock()
	if e != nil && e.url == base {
		if _, err, ok := fresh(r, e); ok {
			if err != nil {
				return nil, err
			}
			return e, nil
		}
	}
	return r.fetchKeysShared(ctx, base, brokerName)
}

func (r *Resolver) fetchKeysShared(ctx context.Context, base, brokerName string) (*cached[*alpwire.BrokerKeys], error) {
	e, err := share(ctx, &r.group, "keys "+brokerName+" "+base, func(ctx context.Context) (*cached[*alpwire.BrokerKeys], error) {
		return r.fetchKeys(ctx, base, brokerName), nil
	})
	if err != nil {
		return nil, err
	}
	if e.err != nil {
		return nil, cachedErr(e)
	}
	return e, nil
}

func (r *Resolver) fetchKeys(ctx context.Context, base, brokerName string) *cached[*alpwire.BrokerKeys] {
	bk, ttl, kerr := r.getKeys(ctx, base, brokerName)
	r.mu.Lock()
	defer r.mu.Unlock()
	prev := r.brokers[brokerName]
	if prev != nil && prev.url != base {
		prev = nil // another URL: its failures are not this one's
	}
	e := settle(r, prev, base, ttl, kerr)
	if kerr == nil {
		e.val = bk
	}
	r.brokers[brokerName] = e
	return e
}

func (r *Resolver) getKeys(ctx context.Context, base, brokerName string) (*alpwire.BrokerKeys, time.Duration, *Error) {
	u, err := r.fetch.checkURL(base)
	if err != nil {
		return nil, 0, asError(err)
	}
	raw := base + BrokerKeysPath
	u = u.JoinPath(BrokerKeysPath)
	ans, err := r.fetch.get(ctx, u)
	if err != nil {
		return nil, 0, asError(err)
	}
	bk, err := alpwire.ParseBrokerKeys(ans.body)
	if err != nil {
		return nil, 0, errorf(CodeInvalid, raw, err, "not a valid, self-signed BrokerKeys")
	}
	if bk.Broker != brokerName {
		return nil, 0, errorf(CodeInvalid, raw, nil, "the keys are of broker %q, not %q", bk.Broker, brokerName)
	}
	if strings.TrimRight(bk.BrokerURL, "/") != base {
		return nil, 0, errorf(CodeInvalid, raw, nil, "the keys name broker_url %q, not %q", bk.BrokerURL, base)
	}
	now := r.cfg.Now()
	// CacheUntil is min(valid_until_ts, now+7d) (Matrix's rule, so a
	// stolen key cannot be published as valid forever).
	ttl := min(bk.CacheUntil(now).Sub(now), r.cfg.MaxMaxAge)
	if ttl <= 0 {
		return nil, 0, errorf(CodeInvalid, raw, nil, "the keys expired at %s", alpwire.Time(bk.ValidUntilTS).UTC().Format(time.RFC3339))
	}
	if hdr, ok := cacheControlMaxAge(ans.header); ok {
		ttl = min(ttl, max(hdr, r.cfg.MinMaxAge))
	}
	return bk, ttl, nil
}

// Refresh fetches a broker's keys again, for a verification that failed
// with a key the cached keys do not hold (the broker may have rotated).
// It fetches at most once per RefreshInterval per broker and not while a
// failure is cached (the backoff holds); otherwise it answers the cache.
func (r *Resolver) Refresh(ctx context.Context, broker string) (*alpwire.BrokerKeys, error) {
	r.mu.Lock()
	e := r.brokers[broker]
	r.mu.Unlock()
	if e == nil {
		return nil, errorf(CodeInvalid, "", nil, "the keys of broker %q were never looked up", broker)
	}
	if e.err != nil && r.cfg.Now().Before(e.expires) {
		return nil, cachedErr(e)
	}
	if e.err == nil && r.cfg.Now().Sub(e.fetched) < r.cfg.RefreshInterval {
		return e.val, nil
	}
	e, err := r.fetchKeysShared(ctx, e.url, broker)
	if err != nil {
		return nil, err
	}
	return e.val, nil
}

// fresh answers a live cache entry: ok is false for none or an expired one.
func fresh[T any](r *Resolver, e *cached[T]) (v T, err error, ok bool) {
	if e == nil || !r.cfg.Now().Before(e.expires) {
		return v, nil, false
	}
	if e.err != nil {
		return v, cachedErr(e), true
	}
	return e.val, nil, true
}

// cachedErr is a cached failure as answered: a copy, saying when the
// next attempt will be.
func cachedErr[T any](e *cached[T]) *Error {
	c := *e.err
	c.RetryAt = e.expires
	return &c
}

// settle makes the cache entry of a fetch's outcome. A failure is cached
// for ErrorBackoff, doubled for each failure in a row before it (prev's),
// up to ErrorTTL: Matrix's "cache errors up to 1 h with exponential
// backoff".
func settle[T any](r *Resolver, prev *cached[T], url string, ttl time.Duration, ferr *Error) *cached[T] {
	now := r.cfg.Now()
	e := &cached[T]{url: url, fetched: now}
	if ferr == nil {
		e.expires = now.Add(ttl)
		return e
	}
	e.err = ferr
	if prev != nil {
		e.failures = prev.failures
	}
	e.failures++
	backoff := r.cfg.ErrorBackoff
	for i := 1; i < e.failures && backoff < r.cfg.ErrorTTL; i++ {
		backoff *= 2
	}
	e.expires = now.Add(min(backoff, r.cfg.ErrorTTL))
	r.cfg.Logger.Warn("discovery failed", "url", ferr.URL, "code", ferr.Code, "error", ferr.Error(),
		"failures", e.failures, "retry_at", e.expires)
	return e
}

// share runs fn once for all concurrent callers with the same key. The
// fetch runs on a context without the first caller's cancellation (it
// has its own time limit), so one caller giving up does not fail the
// others; each caller still returns when its own context ends.
func share[T any](ctx context.Context, g *singleflight.Group, key string, fn func(context.Context) (T, error)) (T, error) {
	ch := g.DoChan(key, func() (any, error) {
		return fn(context.WithoutCancel(ctx))
	})
	select {
	case res := <-ch:
		if res.Err != nil {
			var zero T
			return zero, res.Err
		}
		return res.Val.(T), nil
	case <-ctx.Done():
		var zero T
		return zero, errorf(CodeUnreachable, "", ctx.Err(), "lookup abandoned")
	}
}

// asError is err as an *Error (fetch and checkURL return only those).
func asError(err error) *Error {
	if e, ok := err.(*Error); ok {
		return e
	}
	return errorf(CodeUnreachable, "", err, "lookup failed")
}

// Client is an HTTP client for requests to other brokers that keeps the
// resolver's fences (https only, the dial guard, the Resolve pins, the
// roots) and follows no redirect: a broker-to-broker request goes to the
// federation URL the broker published, and nowhere else. The caller bounds
// each request with its context.
//
// Its transports are the resolver's, cloned: a broker under load may take
// longer than a discovery document's HTTPTimeout to answer a send, and
// keeping more idle connections per peer lets many sends run at once.
func (r *Resolver) Client() *http.Client {
	st := r.fetch.client.Transport.(*schemeTransport)
	clone := func(t *http.Transport) *http.Transport {
		if t == nil {
			return nil
		}
		c := t.Clone()
		c.ResponseHeaderTimeout, c.MaxIdleConnsPerHost = 0, 64
		return c
	}
	return &http.Client{Transport: &schemeTransport{https: clone(st.https), plain: clone(st.plain)},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
}

package clientreg

import (
	"container/list"
	"context"
	"errors"
	"math"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/time/rate"

	alpv1 "github.com/alpd-project/alpd/gen/alp/v1"
	"github.com/alpd-project/alpd/internal/httpjson"
	"github.com/alpd-project/alpd/internal/identitystore"
)

// DCR client ids: "dcr_" and 128 random bits.
const dcrIDPrefix = "dcr_"

// RegistrationResponse is the RFC 7591 §3.2.1 answer to a registration.
type RegistrationResponse struct {
	ClientID                string   `json:"client_id"`
	ClientIDIssuedAt        int64    `json:"client_id_issued_at"`
	ClientName              string   `json:"client_name,omitempty"`
	RedirectURIs            []string `json:"redirect_uris"`
	TokenEndpointAuthMethod string   `json:"token_endpoint_auth_method"`
	GrantTypes              []string `json:"grant_types"`
	ResponseTypes           []string `json:"response_types"`
}

// oauthError is the RFC 7591 §3.2.2 error body.
type oauthError struct {
	Error       string `json:"error"`
	Description string `json:"error_description,omitempty"`
}

func writeOAuthError(w http.ResponseWriter, status int, code, desc string) {
	httpjson.Write(w, status, oauthError{Error: code, Description: desc})
}

// DCRHandler serves RFC 7591 dynamic client registration for tenant:
// POST /oauth/<tenant>/register, mounted by the tenant's authorization
// server. It registers public clients only (PUBLIC_DCR, consumer class).
func (reg *Registrar) DCRHandler(tenant string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			w.Header().Set("Allow", http.MethodPost)
			writeOAuthError(w, http.StatusMethodNotAllowed, CodeInvalidRequest, "use POST")
			return
		}
		ip := reg.clientIP(r)
		if ok, wait := reg.limiter.allow(ip, reg.cfg.Now()); !ok {
			w.Header().Set("Retry-After", strconv.Itoa(retryAfterSeconds(wait)))
			writeOAuthError(w, http.StatusTooManyRequests, CodeTemporarilyUnavailable, "too many registrations from this address; try again later")
			return
		}
		var req publicMetadata
		if e := readJSONBody(w, r, reg.cfg.MaxBodyBytes, &req, false); e != nil {
			code := CodeInvalidRequest
			if e.status == http.StatusBadRequest {
				code = CodeInvalidClientMetadata
			}
			writeOAuthError(w, e.status, code, e.msg)
			return
		}
		md, merr := req.check()
		if merr != nil {
			writeOAuthError(w, http.StatusBadRequest, merr.code, merr.desc)
			return
		}
		if full := reg.dynamicClientsFull(r.Context(), tenant); full != "" {
			w.Header().Set("Retry-After", strconv.Itoa(dcrFullRetryAfter))
			writeOAuthError(w, http.StatusServiceUnavailable, CodeTemporarilyUnavailable, full)
			return
		}
		c, err := reg.cfg.Store.RegisterClient(r.Context(), identitystore.ClientSpec{
			Tenant:       tenant,
			ClientID:     randomID(dcrIDPrefix),
			Kind:         alpv1.ClientKind_CLIENT_KIND_PUBLIC_DCR,
			RedirectURIs: md.RedirectURIs,
			Name:         md.ClientName,
			RegisteredBy: identitystore.RegisteredByDCR,
		})
		switch {
		case errors.Is(err, identitystore.ErrNotHosted):
			writeOAuthError(w, http.StatusNotFound, CodeInvalidRequest, "this broker does not host the tenant")
			return
		case errors.Is(err, identitystore.ErrInvalid):
			writeOAuthError(w, http.StatusBadRequest, CodeInvalidClientMetadata, trimStorePrefix(err))
			return
		case err != nil:
			reg.log.ErrorContext(r.Context(), "dynamic client registration failed", "tenant", tenant, "err", err)
			writeOAuthError(w, http.StatusServiceUnavailable, CodeServerError, "registration failed; try again")
			return
		}
		reg.log.InfoContext(r.Context(), "client registered dynamically", "tenant", tenant, "client_id", c.ID, "remote", ip)
		httpjson.Write(w, http.StatusCreated, RegistrationResponse{
			ClientID:                c.ID,
			ClientIDIssuedAt:        c.Registered.Unix(),
			ClientName:              c.Name,
			RedirectURIs:            c.RedirectURIs,
			TokenEndpointAuthMethod: authMethodNone,
			GrantTypes:              md.GrantTypes,
			ResponseTypes:           md.ResponseTypes,
		})
	})
}

// dcrFullRetryAfter is the Retry-After of a registration refused at the
// bound: unused clients go when they are used or expire, not in seconds.
const dcrFullRetryAfter = 300

// dynamicClientsFull says why tenant may not register another dynamic
// client now, or "" if it may. A tenant the store does not host is left to
// RegisterClient's answer.
func (reg *Registrar) dynamicClientsFull(ctx context.Context, tenant string) string {
	n, total, err := reg.cfg.Store.UnusedDynamicClientCounts(tenant)
	switch {
	case err != nil:
		return ""
	case n >= reg.cfg.MaxUnusedDynamicClientsPerTenant:
		reg.log.WarnContext(ctx, "dynamic client registration refused: the tenant's bound of unused clients is reached",
			"tenant", tenant, "unused", n, "max", reg.cfg.MaxUnusedDynamicClientsPerTenant)
		return "this tenant holds as many newly registered, unused clients as it may; try again later"
	case total >= reg.cfg.MaxUnusedDynamicClients:
		reg.log.WarnContext(ctx, "dynamic client registration refused: the broker's bound of unused clients is reached",
			"tenant", tenant, "unused", total, "max", reg.cfg.MaxUnusedDynamicClients)
		return "the broker holds as many newly registered, unused clients as it may; try again later"
	}
	return ""
}

func trimStorePrefix(err error) string {
	s := err.Error()
	const p = "identitystore: "
	if len(s) > len(p) && s[:len(p)] == p {
		return s[len(p):]
	}
	return s
}

func retryAfterSeconds(d time.Duration) int {
	s := int(math.Ceil(d.Seconds()))
	return max(s, 1)
}

// clientIP is the rate-limiting key of a request: its remote address
// (addressKey), from Config.ClientIP or the connection.
func (reg *Registrar) clientIP(r *http.Request) string {
	if reg.cfg.ClientIP != nil {
		return addressKey(reg.cfg.ClientIP(r))
	}
	return addressKey(r.RemoteAddr)
}

// addressKey is the rate-limiting key of a remote address: an IPv4 address,
// or the /64 of an IPv6 one (a single host usually holds a whole /64, so
// counting its addresses one by one would give it 2^64 budgets). It takes
// "ip", "ip:port" and "[ip]:port", with or without a zone, IPv4-mapped IPv6
// as IPv4. Anything else (a proxy header gone wrong) shares one key rather
// than getting a budget per distinct string.
func addressKey(raw string) string {
	raw = strings.TrimSpace(raw)
	ip, err := netip.ParseAddr(raw)
	if err != nil {
		ap, perr := netip.ParseAddrPort(raw)
		if perr != nil {
			return "unparsable"
		}
		ip = ap.Addr()
	}
	ip = ip.WithZone("").Unmap()
	if ip.Is6() {
		p, _ := ip.Prefix(64)
		return p.String()
	}
	return ip.String()
}

// ipLimiter is a token bucket per key, with at most max keys. When the
// table is full, a new key takes the place of the least recently used one:
// its bucket is forgotten (that key starts with a full burst again), so a
// flood of new addresses makes the limiter more lenient, never refuses
// everyone, and the addresses seen most recently (those being limited
// right now) keep their buckets longest.
type ipLimiter struct {
	every rate.Limit
	burst int
	max   int

	mu  sync.Mutex
	m   map[string]*list.Element // of *limiterEntry
	lru *list.List               // front: most recently used
}

type limiterEntry struct {
	key string
	lim *rate.Limiter
}

func newIPLimiter(every rate.Limit, burst, max int) *ipLimiter {
	return &ipLimiter{every: every, burst: burst, max: max, m: map[string]*list.Element{}, lru: list.New()}
}

// allow takes a token of key's bucket, or says how long until one is
// there.
func (l *ipLimiter) allow(key string, now time.Time) (bool, time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	var lim *rate.Limiter
	if el := l.m[key]; el != nil {
		l.lru.MoveToFront(el)
		lim = el.Value.(*limiterEntry).lim
	} else {
		if l.lru.Len() >= l.max {
			oldest := l.lru.Back()
			l.lru.Remove(oldest)
			delete(l.m, oldest.Value.(*limiterEntry).key)
		}
		lim = rate.NewLimiter(l.every, l.burst)
		l.m[key] = l.lru.PushFront(&limiterEntry{key: key, lim: lim})
	}
	res := lim.ReserveN(now, 1)
	if !res.OK() {
		return false, time.Minute
	}
	if d := res.DelayFrom(now); d > 0 {
		res.CancelAt(now)
		return false, d
	}
	return true, 0
}

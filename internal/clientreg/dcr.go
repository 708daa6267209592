package clientreg

import (
	"errors"
	"math"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"sync"
	"time"

	"golang.org/x/time/rate"

	alpv1 "github.com/alpd-project/alpd/gen/alp/v1"
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
	writeJSON(w, status, oauthError{Error: code, Description: desc})
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
		writeJSON(w, http.StatusCreated, RegistrationResponse{
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

// clientIP is the rate-limiting key of a request: its remote IP, IPv6
// addresses reduced to their /64 (one host usually holds a whole /64).
func (reg *Registrar) clientIP(r *http.Request) string {
	raw := ""
	if reg.cfg.ClientIP != nil {
		raw = reg.cfg.ClientIP(r)
	} else {
		raw = r.RemoteAddr
		if h, _, err := net.SplitHostPort(raw); err == nil {
			raw = h
		}
	}
	ip, err := netip.ParseAddr(raw)
	if err != nil {
		return raw
	}
	ip = ip.Unmap().WithZone("")
	if ip.Is6() {
		p, _ := ip.Prefix(64)
		return p.String()
	}
	return ip.String()
}

// ipLimiter is a token bucket per key, with a bounded number of keys.
type ipLimiter struct {
	every rate.Limit
	burst int
	max   int

	mu sync.Mutex
	m  map[string]*rate.Limiter
}

func newIPLimiter(every rate.Limit, burst, max int) *ipLimiter {
	return &ipLimiter{every: every, burst: burst, max: max, m: map[string]*rate.Limiter{}}
}

// allow takes a token of key's bucket, or says how long until one is
// there.
func (l *ipLimiter) allow(key string, now time.Time) (bool, time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	lim := l.m[key]
	if lim == nil {
		if len(l.m) >= l.max {
			// Forget the keys whose buckets are full again: for them a
			// fresh bucket behaves the same.
			for k, v := range l.m {
				if v.TokensAt(now) >= float64(l.burst) {
					delete(l.m, k)
				}
			}
			if len(l.m) >= l.max {
				return false, time.Minute
			}
		}
		lim = rate.NewLimiter(l.every, l.burst)
		l.m[key] = lim
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

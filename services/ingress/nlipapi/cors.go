package nlipapi

import (
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/alpd-project/alpd/internal/httproute"
	"github.com/alpd-project/alpd/services/ingress"
)

// CORS (the Fetch standard's cross-origin protocol) lets a browser NLIP
// client on another origin call the HTTP binding: the browser asks first
// (a preflight, OPTIONS) and the answer names the origin, methods and
// headers allowed. Only the broker's own host and nlip.allowed_origins are
// allowed. Credentials are bearer tokens the page sends itself, never
// cookies, so Access-Control-Allow-Credentials is never sent: a page can
// use no credential of the person's but the one it holds.
const (
	// corsAllowHeaders are the request headers an NLIP client sends.
	corsAllowHeaders = "Authorization, Content-Type, Idempotency-Key, Accept"
	// corsExposeHeaders are the answer's headers a page may read besides
	// the safelisted ones: when to retry, how to get a token.
	corsExposeHeaders = "Retry-After, WWW-Authenticate"
	// corsMaxAge is how long a browser may keep a preflight's answer.
	corsMaxAge = 10 * time.Minute
)

// preflight is the OPTIONS route of pattern, whose handler takes methods:
// the answer to a browser's preflight, or to a plain OPTIONS the methods
// the route takes. It needs no credential (a preflight carries none).
func (a *API) preflight(pattern string, methods ...string) httproute.Route {
	allow := strings.Join(append(methods, http.MethodOptions), ", ")
	return httproute.Route{Method: http.MethodOptions, Pattern: pattern, Caller: httproute.Public, BodyLimit: httproute.NoBody,
		TooLarge: a.tooLarge, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			h := w.Header()
			h.Set("Allow", allow)
			h.Add("Vary", "Origin")
			origin := r.Header.Get("Origin")
			if origin == "" {
				w.WriteHeader(http.StatusNoContent)
				return
			}
			if !a.originAllowed(r) {
				a.fail(w, r, unread(mediaJSON), newError(http.StatusForbidden, "origin_not_allowed",
					"requests from origin %q are not allowed; the broker's operator lists the allowed origins in nlip.allowed_origins", origin))
				return
			}
			h.Set("Access-Control-Allow-Origin", origin)
			h.Set("Access-Control-Allow-Methods", allow)
			h.Set("Access-Control-Allow-Headers", corsAllowHeaders)
			h.Set("Access-Control-Max-Age", strconv.Itoa(int(corsMaxAge.Seconds())))
			w.WriteHeader(http.StatusNoContent)
		})}
}

// allowOrigin lets the page that made r read the answer, when its origin
// is allowed; any other page gets no CORS headers, and its browser keeps
// the answer from it. The answer varies by Origin either way.
func (a *API) allowOrigin(h http.Header, r *http.Request) {
	h.Add("Vary", "Origin")
	origin := r.Header.Get("Origin")
	if origin == "" || !a.originAllowed(r) {
		return
	}
	h.Set("Access-Control-Allow-Origin", origin)
	h.Set("Access-Control-Expose-Headers", corsExposeHeaders)
}

// originAllowed reports whether r's Origin (which must be set) may call
// the door (ingress.OriginAllowed).
func (a *API) originAllowed(r *http.Request) bool {
	return ingress.OriginAllowed(a.cfg.PublicURL, a.cfg.AllowedOrigins, r.Header.Get("Origin"))
}

// Package nlipapi is ingress's NLIP door (ECMA-431 HTTP and ECMA-432
// WebSocket bindings): agents authenticate with a bearer token, send an
// NLIP message that asks to send a typed ALP message, and get an NLIP reply
// with the envelope id and the outcome policy decided (or "pending" with a
// URL to poll). The mapping is documented in docs/nlip.md. Who may send,
// rate limits, trust and awaiting the decision are ingress's send path
// (ingress.Door); this package only decodes NLIP into it and encodes its
// answers and errors as NLIP. The person's inbox is ingress's too
// (services/ingress/inbox): it is read, acknowledged and pushed here as
// NLIP messages (inbox.go, item.go, push.go).
//
// Routes (all under the broker's public URL):
//
//	POST /nlip, POST /nlip/          one NLIP message (JSON or CBOR); both paths, no redirect
//	GET  /nlip/envelopes/{id}        the outcome of an envelope the person sent
//	GET  /nlip/inbox                 a page of the person's inbox (?after=&limit=&include_acked=)
//	GET  /nlip/inbox/{id}            one item of it
//	GET  /nlip/ws                    WebSocket, one CBOR NLIP message per binary frame
//	GET  /nlip/ws/text               WebSocket, one JSON NLIP message per text frame
//	                                 (both push the inbox's items to an agent with alp.read)
//	OPTIONS on the HTTP routes       CORS preflights of browser clients (cors.go)
//
// Every answer echoes the request's tokens (ECMA-430 §6.2; reply.go).
package nlipapi

import (
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/alpd-project/alpd/internal/httproute"
	"github.com/alpd-project/alpd/internal/nlip"
	"github.com/alpd-project/alpd/services/ingress"
	"github.com/alpd-project/alpd/services/ingress/inbox"
)

// Config tunes the bindings. Zero values take the defaults.
type Config struct {
	// PublicURL is the broker's public base URL, for poll URLs.
	PublicURL string
	// Message bounds every NLIP message (HTTP body or WebSocket frame).
	Message nlip.Limits
	// AllowedOrigins are the Origin host patterns (path.Match syntax, e.g.
	// "app.example.com", "*.example.com"; with "://" the scheme too) a
	// browser client may call from, besides the broker's own host: they
	// may open the WebSocket, and CORS lets them call the HTTP binding.
	// Requests without Origin (not from a browser) are allowed.
	AllowedOrigins []string
	// WebSocket per-connection limits.
	WSMessageRate ingress.Rate
	// WSIdleTimeout closes a connection that sent nothing for this long
	// (default 5m).
	WSIdleTimeout time.Duration
	// WSReadTimeout closes a connection whose message, once begun, has not
	// arrived whole after this long (default 30s).
	WSReadTimeout time.Duration
	// WSMaxPerAgent and WSMaxPerPerson bound the WebSocket connections one
	// agent and all of one person's agents hold open (default 8 and 32).
	WSMaxPerAgent, WSMaxPerPerson int
	// WSWriteTimeout bounds writing one frame to a WebSocket, and how long
	// an agent may take to read what was pushed to it (default 10s): a
	// connection that does not keep up is closed, its items stay in the
	// inbox (push.go).
	WSWriteTimeout time.Duration
	// WSPushWindow is how many items are pushed to a WebSocket before the
	// agent must show it read them (default 16, at most
	// inbox.MaxPageSize): what one connection holds of the inbox at a
	// time.
	WSPushWindow int
	// WSReadBuffer bounds the bytes of WebSocket messages being received
	// and handled, all connections together (default 16 MiB; at least
	// twice the message size limit); one person holds at most a quarter of
	// it (at least twice the size limit). A message that does not fit is
	// discarded as it arrives and answered 503 server_busy.
	WSReadBuffer int64
}

// DefaultConfig returns the defaults.
func DefaultConfig() Config {
	return Config{
		Message:       nlip.DefaultLimits(),
		WSMessageRate: ingress.Rate{Limit: 20, Burst: 40},
		WSIdleTimeout: 5 * time.Minute,

		// What all WebSockets together may hold (docs/operations.md).
		WSReadTimeout:  30 * time.Second,
		WSWriteTimeout: 10 * time.Second,
		WSPushWindow:   16,
		WSMaxPerAgent:  8,
		WSMaxPerPerson: 32,
		WSReadBuffer:   16 << 20,
	}
}

func (c Config) complete() Config {
	d := DefaultConfig()
	if c.Message == (nlip.Limits{}) {
		c.Message = d.Message
	}
	if c.WSMessageRate.Limit <= 0 || c.WSMessageRate.Burst <= 0 {
		c.WSMessageRate = d.WSMessageRate
	}
	if c.WSIdleTimeout <= 0 {
		c.WSIdleTimeout = d.WSIdleTimeout
	}
	if c.WSReadTimeout <= 0 {
		c.WSReadTimeout = d.WSReadTimeout
	}
	if c.WSWriteTimeout <= 0 {
		c.WSWriteTimeout = d.WSWriteTimeout
	}
	if c.WSPushWindow <= 0 {
		c.WSPushWindow = d.WSPushWindow
	}
	c.WSPushWindow = min(c.WSPushWindow, inbox.MaxPageSize)
	if c.WSMaxPerAgent <= 0 {
		c.WSMaxPerAgent = d.WSMaxPerAgent
	}
	if c.WSMaxPerPerson <= 0 {
		c.WSMaxPerPerson = d.WSMaxPerPerson
	}
	if c.WSReadBuffer <= 0 {
		c.WSReadBuffer = d.WSReadBuffer
	}
	// One message at the size limit must fit, or the WebSocket could never
	// take one.
	c.WSReadBuffer = max(c.WSReadBuffer, 2*int64(c.Message.MaxMessageBytes)+2)
	c.PublicURL = strings.TrimRight(c.PublicURL, "/")
	return c
}

// API serves the NLIP bindings.
type API struct {
	s    *ingress.Service
	door *ingress.Door
	cfg  Config
	ws   *wsLimits
	mux  *http.ServeMux
	log  *slog.Logger
}

// New builds the API on the ingress service s: the send path is the
// service's (ingress.Service.Door, shared with the other bindings: its
// decision wait, NMP rules and rate limits are ingress.Options.Door); this
// package decodes NLIP into it and encodes its answers as NLIP.
func New(s *ingress.Service, cfg Config, log *slog.Logger) *API {
	cfg = cfg.complete()
	if log == nil {
		log = slog.Default()
	}
	a := &API{s: s, door: s.Door(), cfg: cfg, ws: newWSLimits(cfg), log: log}
	a.mux = httproute.Handler(a.Routes())
	return a
}

// Routes are the NLIP routes. A message's body is bounded by the configured
// NLIP message size and refused as an NLIP error; the WebSockets stream and
// bound their frames themselves. The handlers take any method and answer a
// wrong one as an NLIP error; OPTIONS has routes of its own, the CORS
// preflights of the HTTP routes (a browser opens a WebSocket without one).
func (a *API) Routes() []httproute.Route {
	message := httproute.Route{Handler: http.HandlerFunc(a.serveMessage), Caller: httproute.Agent,
		BodyLimit: int64(a.cfg.Message.MaxMessageBytes)}
	at := func(rt httproute.Route, pattern string) httproute.Route { rt.Pattern = pattern; return rt }
	routes := []httproute.Route{
		at(message, "/nlip"),
		at(message, "/nlip/"),
		{Pattern: "/nlip/envelopes/{id}", Handler: http.HandlerFunc(a.serveEnvelope), Caller: httproute.Agent, BodyLimit: httproute.NoBody},
		{Pattern: "/nlip/inbox", Handler: http.HandlerFunc(a.serveInbox), Caller: httproute.Agent, BodyLimit: httproute.NoBody},
		{Pattern: "/nlip/inbox/{id}", Handler: http.HandlerFunc(a.serveItem), Caller: httproute.Agent, BodyLimit: httproute.NoBody},
		{Pattern: "/nlip/ws", Caller: httproute.Agent, BodyLimit: httproute.NoBody, Streaming: true,
			Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { a.serveWebSocket(w, r, false) })},
		{Pattern: "/nlip/ws/text", Caller: httproute.Agent, BodyLimit: httproute.NoBody, Streaming: true,
			Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { a.serveWebSocket(w, r, true) })},
	}
	for i := range routes {
		routes[i].TooLarge = a.tooLarge
	}
	// "/nlip/{$}" is /nlip/ alone: an OPTIONS route for the whole subtree
	// would conflict with the method-less routes inside it (ServeMux);
	// other paths under /nlip/ answer OPTIONS 404 like any method.
	return append(routes,
		a.preflight("/nlip", http.MethodPost),
		a.preflight("/nlip/{$}", http.MethodPost),
		a.preflight("/nlip/envelopes/{id}", http.MethodGet),
		a.preflight("/nlip/inbox", http.MethodGet),
		a.preflight("/nlip/inbox/{id}", http.MethodGet),
	)
}

// tooLarge answers a body refused unread as an NLIP error message; unread,
// it has no tokens to echo.
func (a *API) tooLarge(w http.ResponseWriter, r *http.Request, limit int64) {
	e := newError(http.StatusRequestEntityTooLarge, "too_large", "the NLIP message is larger than %d bytes", limit)
	if limit == 0 {
		e = newError(http.StatusRequestEntityTooLarge, "too_large", "this request takes no body")
	}
	a.fail(w, r, unread(replyMedia(r)), e)
}

// ServeHTTP serves the NLIP routes.
func (a *API) ServeHTTP(w http.ResponseWriter, r *http.Request) { a.mux.ServeHTTP(w, r) }

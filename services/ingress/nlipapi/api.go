// Package nlipapi is ingress's NLIP door (ECMA-431 HTTP and ECMA-432
// WebSocket bindings): agents authenticate with a bearer token, send an
// NLIP message that asks to send a typed ALP message, and get an NLIP reply
// with the envelope id and the outcome policy decided (or "pending" with a
// URL to poll). The mapping is documented in docs/nlip.md.
//
// Routes (all under the broker's public URL):
//
//	POST /nlip, POST /nlip/          one NLIP message (JSON or CBOR); both paths, no redirect
//	GET  /nlip/envelopes/{id}        the outcome of an envelope the person sent
//	GET  /nlip/ws                    WebSocket, one CBOR NLIP message per binary frame
//	GET  /nlip/ws/text               WebSocket, one JSON NLIP message per text frame
package nlipapi

import (
	"context"
	"log/slog"
	"net/http"
	"strings"
	"time"

	alpv1 "github.com/alpd-project/alpd/gen/alp/v1"
	"github.com/alpd-project/alpd/internal/agentauth"
	"github.com/alpd-project/alpd/internal/httproute"
	"github.com/alpd-project/alpd/internal/nlip"
	"github.com/alpd-project/alpd/internal/nmp"
	"github.com/alpd-project/alpd/services/ingress"
)

// Backend is what the bindings need from the ingress service.
type Backend interface {
	Authenticator() *agentauth.Authenticator
	EnvelopeID(ctx context.Context, snd ingress.Sender, idempotencyKey string) (string, error)
	Accept(ctx context.Context, sub ingress.Submission) (ingress.Accepted, error)
	Await(tenant, personID, envelopeID string) (*ingress.Waiter, error)
	Decision(ctx context.Context, tenant, personID, envelopeID string) (*alpv1.Decided, error)
	Submitted(ctx context.Context, tenant, personID, envelopeID string) (bool, error)
}

// Config tunes the bindings. Zero values take the defaults.
type Config struct {
	// PublicURL is the broker's public base URL, for poll URLs.
	PublicURL string
	// Message bounds every NLIP message (HTTP body or WebSocket frame).
	Message nlip.Limits
	// NMP bounds and rules for agent-supplied NMP headers.
	NMP nmp.Config
	// DecisionWait is how long a request waits for policy's decision
	// before answering "pending" (default 3s).
	DecisionWait time.Duration
	// Rates: per agent, per person and per tenant (requests per second
	// and burst). Every NLIP message counts against all three.
	PerAgent, PerPerson, PerTenant Rate
	// AllowedOrigins are the Origin host patterns (path.Match syntax, e.g.
	// "app.example.com", "*.example.com") a browser WebSocket may come
	// from, besides the broker's own host. Requests without Origin (not
	// from a browser) are allowed.
	AllowedOrigins []string
	// WebSocket per-connection limits.
	WSMessageRate Rate
	// WSIdleTimeout closes a connection that sent nothing for this long
	// (default 5m).
	WSIdleTimeout time.Duration
	// WSReadTimeout closes a connection whose message, once begun, has not
	// arrived whole after this long (default 30s).
	WSReadTimeout time.Duration
	// WSMaxPerAgent and WSMaxPerPerson bound the WebSocket connections one
	// agent and all of one person's agents hold open (default 8 and 32).
	WSMaxPerAgent, WSMaxPerPerson int
	// WSReadBuffer bounds the bytes of WebSocket messages being received
	// and handled, all connections together (default 16 MiB; at least
	// twice the message size limit); one person holds at most a quarter of
	// it (at least twice the size limit). A message that does not fit is
	// discarded as it arrives and answered 503 server_busy.
	WSReadBuffer int64
}

// Rate is a token bucket: Limit events per second, Burst at once.
type Rate struct {
	Limit float64
	Burst int
}

// DefaultConfig returns the defaults.
func DefaultConfig() Config {
	return Config{
		Message:       nlip.DefaultLimits(),
		NMP:           nmp.DefaultConfig(),
		DecisionWait:  3 * time.Second,
		PerAgent:      Rate{Limit: 20, Burst: 40},
		PerPerson:     Rate{Limit: 50, Burst: 100},
		PerTenant:     Rate{Limit: 1000, Burst: 2000},
		WSMessageRate: Rate{Limit: 20, Burst: 40},
		WSIdleTimeout: 5 * time.Minute,

		// What all WebSockets together may hold (docs/operations.md).
		WSReadTimeout:  30 * time.Second,
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
	if c.NMP == (nmp.Config{}) {
		c.NMP = d.NMP
	}
	if c.DecisionWait <= 0 {
		c.DecisionWait = d.DecisionWait
	}
	for _, r := range []struct{ have, def *Rate }{{&c.PerAgent, &d.PerAgent}, {&c.PerPerson, &d.PerPerson},
		{&c.PerTenant, &d.PerTenant}, {&c.WSMessageRate, &d.WSMessageRate}} {
		if r.have.Limit <= 0 || r.have.Burst <= 0 {
			*r.have = *r.def
		}
	}
	if c.WSIdleTimeout <= 0 {
		c.WSIdleTimeout = d.WSIdleTimeout
	}
	if c.WSReadTimeout <= 0 {
		c.WSReadTimeout = d.WSReadTimeout
	}
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
	backend Backend
	cfg     Config
	log     *slog.Logger
	limits  *limiters
	ws      *wsLimits
	mux     *http.ServeMux
}

// New builds the API.
func New(b Backend, cfg Config, log *slog.Logger) *API {
	cfg = cfg.complete()
	if log == nil {
		log = slog.Default()
	}
	a := &API{backend: b, cfg: cfg, log: log, limits: newLimiters(cfg), ws: newWSLimits(cfg)}
	a.mux = httproute.Handler(a.Routes())
	return a
}

// Routes are the NLIP routes. A message's body is bounded by the configured
// NLIP message size and refused as an NLIP error; the WebSockets stream and
// bound their frames themselves.
func (a *API) Routes() []httproute.Route {
	message := httproute.Route{Handler: http.HandlerFunc(a.serveMessage), Caller: httproute.Agent,
		BodyLimit: int64(a.cfg.Message.MaxMessageBytes)}
	at := func(rt httproute.Route, pattern string) httproute.Route { rt.Pattern = pattern; return rt }
	routes := []httproute.Route{
		at(message, "/nlip"),
		at(message, "/nlip/"),
		{Pattern: "/nlip/envelopes/{id}", Handler: http.HandlerFunc(a.serveEnvelope), Caller: httproute.Agent, BodyLimit: httproute.NoBody},
		{Pattern: "/nlip/ws", Caller: httproute.Agent, BodyLimit: httproute.NoBody, Streaming: true,
			Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { a.serveWebSocket(w, r, false) })},
		{Pattern: "/nlip/ws/text", Caller: httproute.Agent, BodyLimit: httproute.NoBody, Streaming: true,
			Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { a.serveWebSocket(w, r, true) })},
	}
	for i := range routes {
		routes[i].TooLarge = tooLarge
	}
	return routes
}

// tooLarge answers a refused body as an NLIP error message.
func tooLarge(w http.ResponseWriter, r *http.Request, limit int64) {
	if limit == 0 {
		writeError(w, r, newError(http.StatusRequestEntityTooLarge, "too_large", "this request takes no body"))
		return
	}
	writeError(w, r, newError(http.StatusRequestEntityTooLarge, "too_large", "the NLIP message is larger than %d bytes", limit))
}

// ServeHTTP serves the NLIP routes.
func (a *API) ServeHTTP(w http.ResponseWriter, r *http.Request) { a.mux.ServeHTTP(w, r) }

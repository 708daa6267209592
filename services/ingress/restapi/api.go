// Package restapi is ingress's REST door for agents, under /v1/agent/: send
// a typed message and read its outcome, the person's inbox (list, get, ack,
// reply), the message types and their JSON Schemas, and the person's
// connections (list, request). Its OpenAPI 3.1 document is committed
// beside it (openapi.yaml) and served at /v1/agent/openapi.json; the
// person's rules, which agents read at policy's /v1/rules, are described in
// the same document. docs/rest.md is the guide.
//
// Who may send, rate limits, trust and awaiting the decision are ingress's
// send path (ingress.Door), the same as NLIP's: this package only decodes
// JSON into it and answers its outcome and errors, every error as RFC 9457
// problem details with a stable code (internal/httpjson). The sender is
// always the credential's person: a request that names another is refused.
//
// Routes (all under the broker's public URL):
//
//	POST /v1/agent/messages                 send a typed message (Idempotency-Key)
//	GET  /v1/agent/messages/{id}            the outcome of one the person sent
//	GET  /v1/agent/types                    the message types (cursor pages)
//	GET  /v1/agent/types/{name}             one type's JSON Schema
//	GET  /v1/agent/connections              the person's connections (cursor pages)
//	POST /v1/agent/connections              ask someone to connect (connection.request/v1)
//	GET  /v1/agent/openapi.json             the OpenAPI document (public)
package restapi

import (
	"log/slog"
	"net/http"
	"slices"
	"strings"

	"github.com/alpd-project/alpd/internal/httpjson"
	"github.com/alpd-project/alpd/internal/httproute"
	"github.com/alpd-project/alpd/services/ingress"
)

// Base is the root of the REST door.
const Base = "/v1/agent"

// Paths of the routes.
const (
	PathMessages    = Base + "/messages"
	PathTypes       = Base + "/types"
	PathConnections = Base + "/connections"
	PathOpenAPI     = Base + "/openapi.json"
)

// Page sizes of every list.
const (
	DefaultPageSize = 20
	MaxPageSize     = 100
)

// sendBody bounds a send: the envelope ingress stores must fit one NATS
// message anyway (ingress.ErrTooLarge past that), so a larger request is
// refused before it is read.
const sendBody int64 = 256 << 10

// connectBody bounds a connection request: an address, a purpose and 280
// characters.
const connectBody int64 = 8 << 10

// Config tunes the REST door. Zero values take the defaults.
type Config struct {
	// PublicURL is the broker's public base URL: the servers entry of the
	// served OpenAPI document and the status URLs of pending sends.
	PublicURL string
	// Issuers maps each hosted tenant to its OAuth issuer URL, for the
	// served document's OAuth flows.
	Issuers map[string]string
	// Log receives what the agent is not told (nil: discarded).
	Log *slog.Logger
}

// API serves the REST door.
type API struct {
	s    *ingress.Service
	door *ingress.Door
	cfg  Config
	log  *slog.Logger
	doc  *document
	mux  *http.ServeMux
}

// New builds the API on the ingress service s, on the send path the
// service holds (ingress.Service.Door): every request counts against the
// same rate limits as the other doors'.
func New(s *ingress.Service, cfg Config) *API {
	cfg.PublicURL = strings.TrimRight(cfg.PublicURL, "/")
	log := cfg.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	a := &API{s: s, door: s.Door(), cfg: cfg, log: log, doc: mustDocument()}
	a.mux = httproute.Handler(a.Routes())
	return a
}

// Routes are the REST door's routes, each within ingress's /v1/agent/, with
// a problem-details 405 for a known path under another method and 404 for
// any other path under /v1/agent/.
func (a *API) Routes() []httproute.Route {
	agent := httproute.Agent
	routes := []httproute.Route{
		{Method: http.MethodPost, Pattern: PathMessages, Caller: agent, BodyLimit: sendBody, Handler: http.HandlerFunc(a.send)},
		{Method: http.MethodGet, Pattern: PathMessages + "/{id}", Caller: agent, BodyLimit: httproute.NoBody, Handler: http.HandlerFunc(a.status)},
		{Method: http.MethodGet, Pattern: PathTypes, Caller: agent, BodyLimit: httproute.NoBody, Handler: http.HandlerFunc(a.listTypes)},
		{Method: http.MethodGet, Pattern: PathTypes + "/{name...}", Caller: agent, BodyLimit: httproute.NoBody, Handler: http.HandlerFunc(a.getType)},
		{Method: http.MethodGet, Pattern: PathConnections, Caller: agent, BodyLimit: httproute.NoBody, Handler: http.HandlerFunc(a.listConnections)},
		{Method: http.MethodPost, Pattern: PathConnections, Caller: agent, BodyLimit: connectBody, Handler: http.HandlerFunc(a.requestConnection)},
		{Method: http.MethodGet, Pattern: PathOpenAPI, Caller: httproute.Public, BodyLimit: httproute.NoBody, Handler: http.HandlerFunc(a.openAPI)},
	}
	routes = append(routes, a.inboxRoutes()...)
	for i := range routes {
		routes[i].TooLarge = tooLarge
	}
	return append(routes, fallbacks(routes)...)
}

// fallbacks answer every request under /v1/agent/ that no route takes, as
// problems (http.ServeMux would answer plain text): 405 with Allow for a
// path a route serves under other methods, 404 for any other path. One
// subtree route does both, since the mux gives it whatever no
// method-specific route matches.
func fallbacks(routes []httproute.Route) []httproute.Route {
	probe := http.NewServeMux()
	var methods []string
	for _, rt := range routes {
		probe.Handle(rt.Key(), http.NotFoundHandler())
		if !slices.Contains(methods, rt.Method) {
			methods = append(methods, rt.Method)
		}
	}
	return []httproute.Route{{Pattern: Base + "/", Caller: httproute.Agent, BodyLimit: httproute.NoBody,
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			var allow []string
			for _, m := range methods {
				req := r.Clone(r.Context())
				req.Method = m
				if _, pattern := probe.Handler(req); pattern != "" {
					allow = append(allow, m)
					if m == http.MethodGet {
						allow = append(allow, http.MethodHead)
					}
				}
			}
			if len(allow) > 0 {
				w.Header().Set("Allow", strings.Join(allow, ", "))
				httpjson.WriteError(w, httpjson.Errorf(http.StatusMethodNotAllowed, CodeMethodNotAllowed,
					"%s is not allowed here (allowed: %s)", r.Method, strings.Join(allow, ", ")))
				return
			}
			httpjson.WriteError(w, httpjson.Errorf(http.StatusNotFound, CodeNotFound,
				"no agent endpoint at %s: the API is described at %s", truncate(r.URL.Path), PathOpenAPI))
		})}}
}

// tooLarge answers a refused body as a problem.
func tooLarge(w http.ResponseWriter, _ *http.Request, limit int64) {
	if limit == 0 {
		httpjson.WriteError(w, httpjson.Errorf(http.StatusRequestEntityTooLarge, httproute.CodeBodyTooLarge, "this request takes no body"))
		return
	}
	httpjson.WriteError(w, httpjson.Errorf(http.StatusRequestEntityTooLarge, httproute.CodeBodyTooLarge,
		"the request body is larger than %d bytes", limit))
}

// ServeHTTP serves the routes on their own mux (the broker mounts Routes on
// its own).
func (a *API) ServeHTTP(w http.ResponseWriter, r *http.Request) { a.mux.ServeHTTP(w, r) }

func truncate(s string) string {
	if len(s) > 80 {
		return s[:80] + "…"
	}
	return s
}

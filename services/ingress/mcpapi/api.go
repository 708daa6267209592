// Package mcpapi is ingress's MCP door: the Model Context Protocol over
// streamable HTTP at /mcp, on the official Go SDK
// (github.com/modelcontextprotocol/go-sdk), protected by the broker's OAuth
// as the MCP authorization specification asks. Agents such as Claude's
// custom connectors and ChatGPT's connectors reach their person's broker
// here (docs/agents.md).
//
// What it adds around the SDK, in the order a request meets it:
//
//   - the Origin check against DNS rebinding (the broker's own origin and
//     the configured patterns; requests without Origin are not from a
//     browser), and CORS for the allowed origins;
//   - the bearer credential, checked by ingress's Authenticator (access
//     tokens for this broker's audience, personal access tokens): 401 with
//     the RFC 9728 resource_metadata challenge, 403 insufficient_scope with
//     the scope a tools/call or resource read needs, so a client can step
//     up; the SDK binds each session to the tenant, person and agent of
//     the token that opened it (TokenInfo.UserID), so a session presented
//     with any other credential is refused;
//   - bounded sessions per agent and per person, an idle timeout, and SSE
//     heartbeats that keep a quiet stream's write deadline fresh.
//
// Every tool call is admitted by ingress's send path (ingress.Door: rate
// limits per agent, person and tenant; trust from the credential), and
// sends go through it like any binding's. Tools have input and output
// schemas; a refusal is a tool error whose text is a JSON object with a
// stable code (toolError).
//
// New inbox items are announced on the session's stream: a
// notifications/resources/updated for the resource alp://inbox (to
// sessions that subscribed) and a notifications/message from logger
// alp.inbox (to sessions that set a logging level), coalesced, one
// watcher per session.
package mcpapi

import (
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/alpd-project/alpd/internal/httproute"
	"github.com/alpd-project/alpd/services/ingress"
)

// Path is the MCP endpoint.
const Path = "/mcp"

// Config tunes the MCP door. Zero values take the defaults.
type Config struct {
	// PublicURL is the broker's public base URL: its origin is always
	// allowed, and it names the server.
	PublicURL string
	// AllowedOrigins are the Origin host patterns (path.Match syntax, e.g.
	// "app.example.com", "*.example.com", or with a scheme
	// "https://app.example.com") a browser may call /mcp from, besides
	// the broker's own origin. alpd takes them from nlip.allowed_origins.
	AllowedOrigins []string
	// MaxRequestBytes bounds one HTTP request's JSON-RPC body (default
	// 1 MiB).
	MaxRequestBytes int64
	// SessionIdleTimeout closes a session that sent nothing for this long
	// (default 30m).
	SessionIdleTimeout time.Duration
	// MaxSessionsPerAgent and MaxSessionsPerPerson bound the sessions one
	// agent and all of one person's agents hold open (default 8 and 32).
	MaxSessionsPerAgent, MaxSessionsPerPerson int
	// Heartbeat is how often a quiet SSE stream gets a comment line, so
	// that its write deadline (the HTTP server's write timeout, per
	// write) does not pass while nothing happens (default 15s).
	Heartbeat time.Duration
}

// DefaultConfig returns the defaults.
func DefaultConfig() Config {
	return Config{
		MaxRequestBytes:     1 << 20,
		SessionIdleTimeout:  30 * time.Minute,
		MaxSessionsPerAgent: 8, MaxSessionsPerPerson: 32,
		Heartbeat: 15 * time.Second,
	}
}

func (c Config) complete() Config {
	d := DefaultConfig()
	if c.MaxRequestBytes <= 0 {
		c.MaxRequestBytes = d.MaxRequestBytes
	}
	if c.SessionIdleTimeout <= 0 {
		c.SessionIdleTimeout = d.SessionIdleTimeout
	}
	if c.MaxSessionsPerAgent <= 0 {
		c.MaxSessionsPerAgent = d.MaxSessionsPerAgent
	}
	if c.MaxSessionsPerPerson <= 0 {
		c.MaxSessionsPerPerson = d.MaxSessionsPerPerson
	}
	if c.Heartbeat <= 0 {
		c.Heartbeat = d.Heartbeat
	}
	c.PublicURL = strings.TrimRight(c.PublicURL, "/")
	return c
}

// API serves MCP.
type API struct {
	s        *ingress.Service
	door     *ingress.Door
	cfg      Config
	log      *slog.Logger
	sdk      *mcp.StreamableHTTPHandler
	schemas  *mcp.SchemaCache
	tools    []toolDef
	sessions *sessionLimits
	// base answers the SDK's per-request questions (the protocol
	// versions it speaks) for requests that open no session.
	base    *session
	handler http.Handler
}

// New builds the MCP door on the ingress service s, on the send path the
// service holds (ingress.Service.Door): every tool call counts against the
// same rate limits as the other doors' requests.
func New(s *ingress.Service, cfg Config, log *slog.Logger) *API {
	cfg = cfg.complete()
	if log == nil {
		log = slog.Default()
	}
	a := &API{s: s, door: s.Door(), cfg: cfg, log: log, schemas: mcp.NewSchemaCache(),
		sessions: newSessionLimits(cfg.MaxSessionsPerAgent, cfg.MaxSessionsPerPerson)}
	a.tools = a.toolDefs()
	a.base = a.newServer(nil)
	a.sdk = mcp.NewStreamableHTTPHandler(a.serverFor, &mcp.StreamableHTTPOptions{
		Logger:         log,
		SessionTimeout: cfg.SessionIdleTimeout,
		// The SDK's own check refuses a loopback listener reached with
		// another Host, which is every deployment behind a local reverse
		// proxy; the Origin check below is what the MCP transport asks
		// for (DNS rebinding), and every request carries a bearer token.
		DisableLocalhostProtection: true,
		MaxRequestBodyBytes:        cfg.MaxRequestBytes,
	})
	a.handler = a.checkOrigin(a.cors(a.authenticate(a.sdk)))
	return a
}

// Routes are the MCP routes: /mcp takes POST (JSON-RPC), GET (the
// session's stream), DELETE (end the session) and OPTIONS (CORS
// preflight); the SDK answers a wrong method. They stream: a POST may
// answer with an SSE stream that outlives the write timeout.
func (a *API) Routes() []httproute.Route {
	return []httproute.Route{{Pattern: Path, Handler: a.handler, Caller: httproute.Agent,
		BodyLimit: a.cfg.MaxRequestBytes, Streaming: true}}
}

// ServeHTTP serves /mcp.
func (a *API) ServeHTTP(w http.ResponseWriter, r *http.Request) { a.handler.ServeHTTP(w, r) }

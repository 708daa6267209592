package mcpapi

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"slices"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/rs/cors"

	"github.com/alpd-project/alpd/internal/accesstoken"
	"github.com/alpd-project/alpd/internal/agentauth"
	"github.com/alpd-project/alpd/internal/alp"
	"github.com/alpd-project/alpd/internal/httpjson"
	"github.com/alpd-project/alpd/services/ingress"
)

// Error codes of the HTTP layer (tool errors have their own: toolError).
const (
	CodeOriginNotAllowed = "origin_not_allowed"
	CodeInvalidJSONRPC   = "invalid_jsonrpc"
)

// checkOrigin refuses a browser request from an origin that is neither
// the broker's own nor an allowed one (403): the MCP transport's defence
// against DNS rebinding, where a page on evil.example resolves its own
// name to the broker's address. The broker's origin is its configured
// public URL, never the request's Host, which a rebinding page sets to
// its own name. A request without Origin is not from a browser's page.
func (a *API) checkOrigin(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if origin := r.Header.Get("Origin"); origin != "" && !a.originAllowed(origin) {
			httpjson.WriteError(w, httpjson.Errorf(http.StatusForbidden, CodeOriginNotAllowed,
				"requests from origin %q are not allowed at %s (allow it in nlip.allowed_origins)", origin, Path))
			return
		}
		next.ServeHTTP(w, r)
	})
}

func (a *API) originAllowed(origin string) bool {
	return ingress.OriginAllowed(a.cfg.PublicURL, a.cfg.AllowedOrigins, origin)
}

// cors answers preflights from the allowed origins, so a browser-based
// MCP client on another origin can call /mcp. Credentials are bearer
// tokens, never cookies, so none are allowed.
func (a *API) cors(next http.Handler) http.Handler {
	return cors.New(cors.Options{
		AllowOriginFunc: a.originAllowed,
		AllowedMethods:  []string{http.MethodGet, http.MethodPost, http.MethodDelete},
		AllowedHeaders:  []string{"Authorization", "Content-Type", "Accept", "Mcp-Session-Id", "Mcp-Protocol-Version", "Last-Event-ID"},
		ExposedHeaders:  []string{"Mcp-Session-Id", "Mcp-Protocol-Version", "WWW-Authenticate"},
		MaxAge:          600,
	}).Handler(next)
}

type slotKey struct{}

// sessionSlot is what a request that may open a session carries to
// serverFor: the agent it opens it for, and the server made for it.
type sessionSlot struct {
	principal agentauth.Principal
	server    *session
	tracked   *tracked
}

// authenticate checks the request's bearer credential with ingress's
// Authenticator and the scope the request's JSON-RPC call needs, bounds
// the sessions an agent opens, then hands the request to the SDK with
// the token's TokenInfo: its UserID (tenant, person and agent) binds the
// session the request opens, and the SDK refuses the session to any
// other (403 "session user mismatch").
func (a *API) authenticate(next http.Handler) http.Handler {
	// The SDK reads TokenInfo only from what its own middleware stored;
	// the credential was checked here already, so its verifier hands on
	// what this check found.
	sdkAuth := auth.RequireBearerToken(func(ctx context.Context, _ string, _ *http.Request) (*auth.TokenInfo, error) {
		if ti, ok := ctx.Value(tokenInfoKey{}).(*auth.TokenInfo); ok {
			return ti, nil
		}
		return nil, auth.ErrInvalidToken
	}, &auth.RequireBearerTokenOptions{AllowMissingExpiration: true})(next)

	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p, err := a.s.Authenticator().Authenticate(r.Context(), r.Header.Get("Authorization"))
		if err != nil {
			httpjson.WriteError(w, a.authError(err))
			return
		}
		ctx := r.Context()
		var slot *sessionSlot
		if r.Method == http.MethodPost {
			body, err := io.ReadAll(r.Body)
			if err != nil {
				var mbe *http.MaxBytesError
				if errors.As(err, &mbe) {
					httpjson.WriteError(w, httpjson.Errorf(http.StatusRequestEntityTooLarge, "body_too_large", "the request body exceeds %d bytes", mbe.Limit))
					return
				}
				httpjson.WriteError(w, httpjson.Errorf(http.StatusBadRequest, CodeInvalidJSONRPC, "the request body could not be read"))
				return
			}
			r.Body = io.NopCloser(bytes.NewReader(body))
			if e := a.checkScopes(p, body); e != nil {
				httpjson.WriteError(w, e)
				return
			}
			if id := r.Header.Get("Mcp-Session-Id"); id != "" {
				a.sessions.touch(id)
			} else {
				slot = &sessionSlot{principal: p, tracked: a.sessions.reserve(p)}
				ctx = context.WithValue(ctx, slotKey{}, slot)
			}
		} else if id := r.Header.Get("Mcp-Session-Id"); id != "" {
			a.sessions.touch(id)
		}
		ti := &auth.TokenInfo{Scopes: slices.Clone(p.Scopes), UserID: userID(p)}
		ctx = context.WithValue(ctx, tokenInfoKey{}, ti)
		r = r.WithContext(ctx)
		if r.Method == http.MethodGet {
			a.serveStream(sdkAuth, w, r)
		} else {
			sdkAuth.ServeHTTP(w, r)
		}
		if slot != nil {
			a.settle(slot)
		}
	})
}

type tokenInfoKey struct{}

// userID is what a session is bound to: the tenant, person and agent of
// the credential. Another agent of the same person is another user.
func userID(p agentauth.Principal) string {
	return p.Tenant + "/" + p.PersonID + "/" + p.AgentID
}

// authError is a refused credential as problem details with its
// challenge (ingress.Problem). A request without any credential also hears
// which scopes there are, so a client can ask for them (MCP's scope
// selection).
func (a *API) authError(err error) *httpjson.Error {
	e := ingress.Problem(err)
	if e.Code == ingress.CodeAuthRequired {
		e.Challenge = accesstoken.Challenge(a.s.Authenticator().ResourceMetadataURL, alp.Scopes()...)
	}
	return e
}

// rpcCall is the part of a JSON-RPC message the scope check reads.
type rpcCall struct {
	Method string `json:"method"`
	Params struct {
		Name string `json:"name"`
		URI  string `json:"uri"`
	} `json:"params"`
}

// checkScopes refuses a request whose calls need a scope the credential
// lacks: 403 insufficient_scope with a challenge naming the scopes to ask
// for (those it has and those missing), so that a client can step up
// (MCP authorization, scope challenge). A body that is not JSON-RPC is
// left to the SDK to refuse.
func (a *API) checkScopes(p agentauth.Principal, body []byte) *httpjson.Error {
	var calls []rpcCall
	trimmed := bytes.TrimSpace(body)
	if len(trimmed) > 0 && trimmed[0] == '[' {
		_ = json.Unmarshal(trimmed, &calls)
	} else {
		var c rpcCall
		if json.Unmarshal(trimmed, &c) == nil {
			calls = []rpcCall{c}
		}
	}
	var missing []string
	for _, c := range calls {
		for _, s := range a.scopesFor(c) {
			if !slices.Contains(p.Scopes, s) && !slices.Contains(missing, s) {
				missing = append(missing, s)
			}
		}
	}
	if len(missing) == 0 {
		return nil
	}
	var want []string
	for _, s := range alp.Scopes() {
		if slices.Contains(p.Scopes, s) || slices.Contains(missing, s) {
			want = append(want, s)
		}
	}
	desc := "this call needs the scope " + strings.Join(missing, " and ")
	if p.Credential == agentauth.CredentialPAT {
		desc += ": mint a personal access token that has it"
	}
	te := &accesstoken.Error{Code: accesstoken.CodeInsufficientScope, Description: desc, Scope: strings.Join(want, " ")}
	return &httpjson.Error{Status: http.StatusForbidden, Code: accesstoken.CodeInsufficientScope, Message: desc,
		Challenge: te.WWWAuthenticate(a.s.Authenticator().ResourceMetadataURL)}
}

// scopesFor is what one call needs: a tool's scopes, alp.read for the
// inbox resource.
func (a *API) scopesFor(c rpcCall) []string {
	switch c.Method {
	case "tools/call":
		for _, t := range a.tools {
			if t.name == c.Params.Name {
				return t.scopes
			}
		}
	case "resources/read", "resources/subscribe":
		if c.Params.URI == inboxURI {
			return []string{alp.ScopeRead}
		}
	}
	return nil
}

package api

import (
	"context"
	"log/slog"
	"net/http"

	"github.com/alpd-project/alpd/internal/agentauth"
	"github.com/alpd-project/alpd/internal/httproute"
	"github.com/alpd-project/alpd/internal/signin"
	"github.com/alpd-project/alpd/services/ledger/storage"
)

// ScopeRead is the scope an agent's credential needs to read its person's
// ledger (identity.Scopes).
const ScopeRead = "alp.read"

// Backend is what the API needs from the ledger service.
type Backend interface {
	// Ready is nil once the service has started; until then Storage must
	// not be called.
	Ready() error
	// Storage reads the logs.
	Storage() storage.Reader
}

// Authenticator checks an agent's bearer credential
// (agentauth.Authenticator; errors are *agentauth.Error).
type Authenticator interface {
	Authenticate(ctx context.Context, authorization string, scopes ...string) (agentauth.Principal, error)
}

// Sessions finds a person's web session (identity's sign-in,
// signin.Service). It is only available where identity runs in the same
// process.
type Sessions interface {
	Session(r *http.Request) (*signin.Session, error)
}

// Limits bound the work one request may ask for. Zero values take the
// defaults.
type Limits struct {
	// DefaultPage is the number of entries a page has when the request
	// does not say (default 100); MaxPage the most it may ask for
	// (default 1000).
	DefaultPage, MaxPage int
	// MaxExports is the number of exports this process streams at once
	// (default 4); more are refused with 429.
	MaxExports int
}

func (l *Limits) complete() {
	if l.DefaultPage <= 0 {
		l.DefaultPage = 100
	}
	if l.MaxPage <= 0 {
		l.MaxPage = 1000
	}
	l.DefaultPage = min(l.DefaultPage, l.MaxPage)
	if l.MaxExports <= 0 {
		l.MaxExports = 4
	}
}

// Options build an API.
type Options struct {
	Backend Backend
	// Auth checks bearer credentials. Required.
	Auth Authenticator
	// Sessions, if set, lets a signed-in person read (GET only) with the
	// session cookie. Nil in split mode, where only bearer credentials
	// work on the ledger's processes.
	Sessions Sessions
	Limits   Limits
	Logger   *slog.Logger
}

// API serves a person's own ledger over HTTP (ServeHTTP) and gRPC
// (GRPCServer). It is safe for concurrent use.
type API struct {
	backend  Backend
	auth     Authenticator
	sessions Sessions
	limits   Limits
	log      *slog.Logger
	exports  chan struct{}
	mux      *http.ServeMux
}

// New builds the API.
func New(o Options) *API {
	o.Limits.complete()
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	a := &API{backend: o.Backend, auth: o.Auth, sessions: o.Sessions, limits: o.Limits, log: o.Logger,
		exports: make(chan struct{}, o.Limits.MaxExports)}
	a.mux = httproute.Handler(a.Routes())
	return a
}

// ServeHTTP serves the routes under /v1/ledger.
func (a *API) ServeHTTP(w http.ResponseWriter, r *http.Request) { a.mux.ServeHTTP(w, r) }

// store returns the backend's storage once the service has started.
func (a *API) store() (storage.Reader, *Error) {
	if a.backend == nil {
		return nil, newError(http.StatusServiceUnavailable, CodeNotReady, "the ledger is not available")
	}
	if err := a.backend.Ready(); err != nil {
		e := newError(http.StatusServiceUnavailable, CodeNotReady, "the ledger is not ready yet; try again shortly")
		e.RetryAfter, e.cause = 1, err
		return nil, e
	}
	st := a.backend.Storage()
	if st == nil {
		return nil, newError(http.StatusServiceUnavailable, CodeNotReady, "the ledger is not available")
	}
	return st, nil
}

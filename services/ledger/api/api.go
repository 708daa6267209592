package api

import (
	"context"
	"log/slog"
	"net/http"
	"time"

	"github.com/alpd-project/alpd/internal/agentauth"
	"github.com/alpd-project/alpd/internal/httpjson"
	"github.com/alpd-project/alpd/internal/httproute"
	"github.com/alpd-project/alpd/internal/signin"
	"github.com/alpd-project/alpd/services/ledger/storage"
)

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
	// (default 4); more are refused with 429 too_many_exports.
	MaxExports int
	// MaxExportsPerPerson is how many of those one person may hold at once
	// (default 1, at most MaxExports); more are refused with 429
	// export_in_progress. Without it one person's connections could take
	// every slot and starve everyone else.
	MaxExportsPerPerson int
	// ExportWriteTimeout bounds each write of an export to the client
	// (default 30s): a reader that stops reading is cut off after it and
	// its slot is freed. Over HTTP only (gRPC has its own flow control).
	ExportWriteTimeout time.Duration
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
	if l.MaxExportsPerPerson <= 0 {
		l.MaxExportsPerPerson = 1
	}
	l.MaxExportsPerPerson = min(l.MaxExportsPerPerson, l.MaxExports)
	if l.ExportWriteTimeout <= 0 {
		l.ExportWriteTimeout = DefaultExportWriteTimeout
	}
}

// DefaultExportWriteTimeout is Limits.ExportWriteTimeout's default: ample
// for one 64 KiB chunk on a slow link, short enough that a stalled reader
// gives its slot back soon.
const DefaultExportWriteTimeout = 30 * time.Second

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
	exports  *exportSlots
	mux      *http.ServeMux
}

// New builds the API.
func New(o Options) *API {
	o.Limits.complete()
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	a := &API{backend: o.Backend, auth: o.Auth, sessions: o.Sessions, limits: o.Limits, log: o.Logger,
		exports: newExportSlots(o.Limits.MaxExports, o.Limits.MaxExportsPerPerson)}
	a.mux = httproute.Handler(a.Routes())
	return a
}

// ServeHTTP serves the routes under /v1/ledger.
func (a *API) ServeHTTP(w http.ResponseWriter, r *http.Request) { a.mux.ServeHTTP(w, r) }

// store returns the backend's storage once the service has started.
func (a *API) store() (storage.Reader, *httpjson.Error) {
	if a.backend == nil {
		return nil, httpjson.Errorf(http.StatusServiceUnavailable, CodeNotReady, "the ledger is not available")
	}
	if err := a.backend.Ready(); err != nil {
		e := httpjson.Errorf(http.StatusServiceUnavailable, CodeNotReady, "the ledger is not ready yet; try again shortly")
		e.RetryAfter, e.Cause = 1, err
		return nil, e
	}
	st := a.backend.Storage()
	if st == nil {
		return nil, httpjson.Errorf(http.StatusServiceUnavailable, CodeNotReady, "the ledger is not available")
	}
	return st, nil
}

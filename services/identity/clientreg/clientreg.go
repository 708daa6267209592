package clientreg

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base32"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net/http"
	"strings"
	"time"

	"golang.org/x/time/rate"

	"github.com/alpd-project/alpd/internal/alp"
	"github.com/alpd-project/alpd/internal/bus"
	"github.com/alpd-project/alpd/internal/httpjson"
	"github.com/alpd-project/alpd/internal/identitystore"
	"github.com/alpd-project/alpd/internal/signin"
)

// Defaults.
const (
	DefaultMaxBodyBytes       = 64 << 10
	DefaultPATLifetime        = 30 * 24 * time.Hour
	DefaultMaxPATLifetime     = 90 * 24 * time.Hour
	MinPATLifetime            = time.Hour
	DefaultMaxPATsPerPerson   = 50
	DefaultDCRBurst           = 5
	DefaultDCRLimiterCapacity = 10000
	// DefaultMaxUnusedDynamicClients bounds the dynamically registered
	// clients nobody has used yet, over all tenants; the per-tenant
	// default leaves room for several tenants under it.
	DefaultMaxUnusedDynamicClients          = 10000
	DefaultMaxUnusedDynamicClientsPerTenant = 2000
)

// DefaultDCRRate is how many registrations one remote IP (IPv6: /64) may
// make: one every 6 seconds on average, after a burst of DefaultDCRBurst.
var DefaultDCRRate = rate.Every(6 * time.Second)

// Sessions is what the admin and PAT endpoints need of internal/signin
// (*signin.Service).
type Sessions interface {
	// Session returns the request's valid session, or an error (a
	// *httpjson.Error: 401 without or with an invalid session).
	Session(r *http.Request) (*signin.Session, error)
	// CheckCSRF checks a state-changing request (Origin and token); it
	// answers a *httpjson.Error (403) when it fails.
	CheckCSRF(r *http.Request) error
}

// Config configures a Registrar.
type Config struct {
	// Store records clients and tokens. Required.
	Store *identitystore.Store
	// Sessions authenticates people: required for AdminHandler and
	// PATHandler.
	Sessions Sessions
	// Bus is the identity service's bus; with it, PATs are listed through
	// StreamPATLister unless PATLister is set.
	Bus *bus.Bus
	// PATLister lists a person's PATs (GET /v1/pats).
	PATLister PATLister

	// AdminRole is the session role that may register company clients and
	// bind vendor attestations. Default alp.AdminRole.
	AdminRole string
	// Scopes are the scopes a PAT may carry. None means no PAT can be
	// issued.
	Scopes []string
	// DefaultPATLifetime (default 30 days) applies when a request names no
	// expires_in; MaxPATLifetime (default 90 days) bounds it. Neither may
	// be below MinPATLifetime.
	DefaultPATLifetime time.Duration
	MaxPATLifetime     time.Duration
	// MaxPATsPerPerson bounds a person's PATs that are neither revoked nor
	// expired (default 50).
	MaxPATsPerPerson int

	// DCRRate and DCRBurst limit dynamic registrations per remote IP
	// (IPv6 per /64). Default DefaultDCRRate, DefaultDCRBurst.
	DCRRate  rate.Limit
	DCRBurst int
	// DCRLimiterCapacity bounds the remote IPs tracked at once (default
	// 10000); when that many are tracked, a new one takes the place of the
	// least recently seen, whose budget starts afresh.
	DCRLimiterCapacity int
	// MaxUnusedDynamicClients bounds the dynamically registered clients
	// that nobody has used yet, over all the store's tenants (default
	// DefaultMaxUnusedDynamicClients); MaxUnusedDynamicClientsPerTenant
	// bounds them per tenant (default
	// DefaultMaxUnusedDynamicClientsPerTenant). At the bound registration
	// answers 503 temporarily_unavailable until some are used or expire.
	// Registrations racing on several replicas may pass it by as many as
	// are in flight.
	MaxUnusedDynamicClients          int
	MaxUnusedDynamicClientsPerTenant int
	// ClientIP returns the remote IP of a request for rate limiting.
	// Default: the host of r.RemoteAddr. Set it only behind a proxy you
	// trust to report the client's address.
	ClientIP func(r *http.Request) string

	// MaxBodyBytes bounds request bodies (default 64 KiB; larger is 413).
	MaxBodyBytes int64
	// Logger; nil discards. Secrets are never logged.
	Logger *slog.Logger
	// Now is the clock; default time.Now.
	Now func() time.Time
}

// Registrar serves client registration and personal access tokens. It is
// safe for concurrent use.
type Registrar struct {
	cfg     Config
	log     *slog.Logger
	limiter *ipLimiter
	pats    PATLister
}

// New validates cfg and fills in its defaults.
func New(cfg Config) (*Registrar, error) {
	var errs []error
	bad := func(format string, a ...any) { errs = append(errs, fmt.Errorf("clientreg: "+format, a...)) }
	if cfg.Store == nil {
		bad("Store is required")
	}
	if cfg.AdminRole == "" {
		cfg.AdminRole = alp.AdminRole
	}
	for _, s := range cfg.Scopes {
		if !validScope(s) {
			bad("Scopes: %q is not a scope token", s)
		}
	}
	if cfg.DefaultPATLifetime == 0 {
		cfg.DefaultPATLifetime = DefaultPATLifetime
	}
	if cfg.MaxPATLifetime == 0 {
		cfg.MaxPATLifetime = DefaultMaxPATLifetime
	}
	switch {
	case cfg.MaxPATLifetime < MinPATLifetime:
		bad("MaxPATLifetime %v is below %v", cfg.MaxPATLifetime, MinPATLifetime)
	case cfg.DefaultPATLifetime < MinPATLifetime || cfg.DefaultPATLifetime > cfg.MaxPATLifetime:
		bad("DefaultPATLifetime %v must be between %v and MaxPATLifetime %v", cfg.DefaultPATLifetime, MinPATLifetime, cfg.MaxPATLifetime)
	}
	if cfg.MaxPATsPerPerson == 0 {
		cfg.MaxPATsPerPerson = DefaultMaxPATsPerPerson
	}
	if cfg.MaxPATsPerPerson < 0 {
		bad("MaxPATsPerPerson is negative")
	}
	if cfg.DCRRate == 0 {
		cfg.DCRRate = DefaultDCRRate
	}
	if cfg.DCRBurst == 0 {
		cfg.DCRBurst = DefaultDCRBurst
	}
	if cfg.DCRRate < 0 || cfg.DCRBurst < 0 {
		bad("DCRRate and DCRBurst must not be negative")
	}
	if cfg.DCRLimiterCapacity == 0 {
		cfg.DCRLimiterCapacity = DefaultDCRLimiterCapacity
	}
	if cfg.MaxUnusedDynamicClients == 0 {
		cfg.MaxUnusedDynamicClients = DefaultMaxUnusedDynamicClients
	}
	if cfg.MaxUnusedDynamicClientsPerTenant == 0 {
		cfg.MaxUnusedDynamicClientsPerTenant = min(DefaultMaxUnusedDynamicClientsPerTenant, cfg.MaxUnusedDynamicClients)
	}
	if cfg.DCRLimiterCapacity < 0 || cfg.MaxUnusedDynamicClients < 0 || cfg.MaxUnusedDynamicClientsPerTenant < 0 {
		bad("DCRLimiterCapacity, MaxUnusedDynamicClients and MaxUnusedDynamicClientsPerTenant must not be negative")
	}
	if cfg.MaxBodyBytes == 0 {
		cfg.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if cfg.MaxBodyBytes < 0 {
		bad("MaxBodyBytes is negative")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	r := &Registrar{
		cfg:     cfg,
		log:     cfg.Logger.With("component", "clientreg"),
		limiter: newIPLimiter(cfg.DCRRate, cfg.DCRBurst, cfg.DCRLimiterCapacity),
		pats:    cfg.PATLister,
	}
	if r.pats == nil && cfg.Bus != nil {
		r.pats = StreamPATLister{Bus: cfg.Bus, Store: cfg.Store}
	}
	return r, nil
}

// validScope: an RFC 6749 scope token of at most 128 bytes.
func validScope(s string) bool { return len(s) <= 128 && alp.IsScopeToken(s) }

var idEncoding = base32.NewEncoding("abcdefghijklmnopqrstuvwxyz234567").WithPadding(base32.NoPadding)

// randomID is prefix followed by 128 random bits in lowercase base32.
func randomID(prefix string) string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // never fails (Go 1.24+)
	return prefix + idEncoding.EncodeToString(b[:])
}

// errBody is a refusal to read a request body: status and message.
type errBody struct {
	status int
	msg    string
}

func (e *errBody) Error() string { return e.msg }

// readJSONBody reads a JSON object request body of at most max bytes
// (413 beyond), with Content-Type application/json (415 otherwise), into v.
// strict refuses unknown members.
func readJSONBody(w http.ResponseWriter, r *http.Request, max int64, v any, strict bool) *errBody {
	mt, params, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if err != nil || mt != "application/json" {
		return &errBody{http.StatusUnsupportedMediaType, "the body must be application/json"}
	}
	if cs, ok := params["charset"]; ok && !strings.EqualFold(cs, "utf-8") {
		return &errBody{http.StatusUnsupportedMediaType, "the body must be UTF-8 JSON"}
	}
	if r.ContentLength > max {
		return &errBody{http.StatusRequestEntityTooLarge, fmt.Sprintf("the body exceeds %d bytes", max)}
	}
	data, err := io.ReadAll(http.MaxBytesReader(w, r.Body, max))
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			return &errBody{http.StatusRequestEntityTooLarge, fmt.Sprintf("the body exceeds %d bytes", max)}
		}
		return &errBody{http.StatusBadRequest, "could not read the body"}
	}
	data = bytes.TrimSpace(data)
	if len(data) == 0 || data[0] != '{' {
		return &errBody{http.StatusBadRequest, "the body must be a JSON object"}
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	if strict {
		dec.DisallowUnknownFields()
	}
	if err := dec.Decode(v); err != nil {
		return &errBody{http.StatusBadRequest, "invalid JSON: " + jsonProblem(err)}
	}
	if _, err := dec.Token(); err != io.EOF {
		return &errBody{http.StatusBadRequest, "invalid JSON: data after the object"}
	}
	return nil
}

// jsonProblem describes a decoding error without echoing input values.
func jsonProblem(err error) string {
	var te *json.UnmarshalTypeError
	var se *json.SyntaxError
	switch {
	case errors.As(err, &te):
		if te.Field != "" {
			return fmt.Sprintf("%s must be %s", te.Field, jsonTypeName(te.Type.Kind().String()))
		}
		return "wrong type"
	case errors.As(err, &se):
		return fmt.Sprintf("syntax error at byte %d", se.Offset)
	case strings.HasPrefix(err.Error(), "json: unknown field "):
		return "unknown member " + strings.TrimPrefix(err.Error(), "json: unknown field ")
	}
	return "malformed"
}

func jsonTypeName(kind string) string {
	switch kind {
	case "slice", "array":
		return "an array"
	case "string":
		return "a string"
	case "struct", "map":
		return "an object"
	case "bool":
		return "a boolean"
	case "ptr":
		return "a value of another type"
	}
	return "a number"
}

// apiError is an error of the admin and PAT endpoints, answered as
// problem details like signin's.
func apiError(status int, code, msg string) *httpjson.Error {
	return &httpjson.Error{Status: status, Code: code, Message: msg}
}

// Error codes of the admin and PAT endpoints (besides signin's session and
// CSRF codes).
const (
	CodeForbidden        = "forbidden"
	CodeNotFound         = "not_found"
	CodeInvalidBody      = "invalid_request"
	CodeBodyTooLarge     = "body_too_large"
	CodeUnsupportedMedia = "unsupported_media_type"
	CodeMethodNotAllowed = "method_not_allowed"
	CodeTooManyPATs      = "too_many_tokens"
	CodeInternal         = "internal_error"
	CodeUnavailable      = "unavailable"
)

func bodyAPIError(e *errBody) *httpjson.Error {
	code := CodeInvalidBody
	switch e.status {
	case http.StatusRequestEntityTooLarge:
		code = CodeBodyTooLarge
	case http.StatusUnsupportedMediaType:
		code = CodeUnsupportedMedia
	}
	return apiError(e.status, code, e.msg)
}

// storeAPIError turns an identitystore error into an answer; messages of
// ErrInvalid name the field and hold no secret.
func (reg *Registrar) storeAPIError(ctx context.Context, what string, err error) *httpjson.Error {
	switch {
	case errors.Is(err, identitystore.ErrInvalid):
		return apiError(http.StatusBadRequest, CodeInvalidBody, strings.TrimPrefix(err.Error(), "identitystore: "))
	case errors.Is(err, identitystore.ErrNotFound):
		return apiError(http.StatusNotFound, CodeNotFound, strings.TrimPrefix(err.Error(), "identitystore: "))
	case errors.Is(err, identitystore.ErrExists):
		return apiError(http.StatusConflict, "already_exists", strings.TrimPrefix(err.Error(), "identitystore: "))
	case errors.Is(err, identitystore.ErrNotHosted):
		return apiError(http.StatusNotFound, signin.CodeUnknownTenant, "this broker does not host the tenant")
	}
	reg.log.ErrorContext(ctx, what+" failed", "err", err)
	return apiError(http.StatusServiceUnavailable, CodeUnavailable, what+" failed; try again")
}

func methodNotAllowed(w http.ResponseWriter, allow ...string) {
	w.Header().Set("Allow", strings.Join(allow, ", "))
	httpjson.WriteError(w, apiError(http.StatusMethodNotAllowed, CodeMethodNotAllowed, "use "+strings.Join(allow, " or ")))
}

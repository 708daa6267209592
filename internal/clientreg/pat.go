package clientreg

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/alpd-project/alpd/internal/accesstoken"
	"github.com/alpd-project/alpd/internal/bus"
	"github.com/alpd-project/alpd/internal/httpjson"
	"github.com/alpd-project/alpd/internal/httproute"
	"github.com/alpd-project/alpd/internal/identitystore"
	"github.com/alpd-project/alpd/internal/streams"
)

// Paths of the PAT endpoints.
const (
	PathPATs = "/v1/pats"
	PathPAT  = PathPATs + "/{id}"
)

// maxPATName bounds a PAT's name.
const maxPATName = 100

// PATLister lists a person's personal access tokens, revoked and expired
// ones included.
type PATLister interface {
	PersonPATs(ctx context.Context, tenant, personID string) ([]identitystore.PAT, error)
}

// StreamPATLister lists PATs from the subjects of the identity stream
// (alp.identity.<tenant>.pat.<id>), reading each from the store. The bus's
// NATS user needs STREAM.INFO on the identity stream (the identity role has
// it).
type StreamPATLister struct {
	Bus   *bus.Bus
	Store *identitystore.Store
}

// PersonPATs lists personID's PATs, newest first. A PAT this store has not
// applied yet is left out.
func (l StreamPATLister) PersonPATs(ctx context.Context, tenant, personID string) ([]identitystore.PAT, error) {
	st, err := l.Bus.JetStream().Stream(ctx, l.Bus.StreamName(streams.Identity))
	if err != nil {
		return nil, fmt.Errorf("clientreg: identity stream: %w", err)
	}
	prefix := fmt.Sprintf("%s.%s.%s.pat.", bus.SubjectPrefix, streams.Identity, bus.TenantToken(tenant))
	info, err := st.Info(ctx, jetstream.WithSubjectFilter(prefix+"*"))
	if err != nil {
		return nil, fmt.Errorf("clientreg: listing PAT subjects: %w", err)
	}
	var out []identitystore.PAT
	for subj := range info.State.Subjects {
		p, err := l.Store.PAT(tenant, strings.TrimPrefix(subj, prefix))
		if err != nil || p.PersonID != personID {
			continue
		}
		out = append(out, p)
	}
	slices.SortFunc(out, func(a, b identitystore.PAT) int {
		if c := b.Issued.Compare(a.Issued); c != 0 {
			return c
		}
		return strings.Compare(a.ID, b.ID)
	})
	return out, nil
}

// PATRequest is the body of POST /v1/pats.
type PATRequest struct {
	Name   string   `json:"name"`
	Scopes []string `json:"scopes"`
	// ExpiresIn is the lifetime in seconds; default Config.DefaultPATLifetime,
	// between MinPATLifetime and Config.MaxPATLifetime.
	ExpiresIn *int64 `json:"expires_in,omitempty"`
}

// PATInfo describes a PAT to its owner: never the token nor its hash.
type PATInfo struct {
	ID            string    `json:"id"`
	Name          string    `json:"name"`
	Scopes        []string  `json:"scopes"`
	CreatedAt     time.Time `json:"created_at"`
	ExpiresAt     time.Time `json:"expires_at"`
	Expired       bool      `json:"expired"`
	Revoked       bool      `json:"revoked"`
	RevokedReason string    `json:"revoked_reason,omitempty"`
}

// IssuedPAT is the answer to POST /v1/pats: the token, shown this once.
type IssuedPAT struct {
	PATInfo
	Token string `json:"token"`
}

// PATList is the answer to GET /v1/pats.
type PATList struct {
	PATs []PATInfo `json:"pats"`
}

func patInfo(p identitystore.PAT, now time.Time) PATInfo {
	scopes := p.Scopes
	if scopes == nil {
		scopes = []string{}
	}
	return PATInfo{
		ID: p.ID, Name: p.Name, Scopes: scopes, CreatedAt: p.Issued.UTC(), ExpiresAt: p.Expires.UTC(),
		Expired: !now.Before(p.Expires), Revoked: p.Revoked, RevokedReason: p.RevokedReason,
	}
}

// PATHandler serves a signed-in person's personal access tokens:
//
//	POST   /v1/pats        issue one (CSRF); 201 with the token, shown once
//	GET    /v1/pats        list the person's tokens (never the token or hash)
//	DELETE /v1/pats/{id}   revoke one of the person's tokens (CSRF); 204
//
// Mount it for "/v1/pats" and "/v1/pats/". Answers 401 without a session
// (also for GET: this is an API, not a page), 403 without CSRF token, 404
// for another person's token.
func (reg *Registrar) PATHandler() http.Handler { return httproute.Handler(reg.PATRoutes()) }

func (reg *Registrar) serveIssuePAT(w http.ResponseWriter, r *http.Request) {
	sess, ok := reg.person(w, r, true)
	if !ok {
		return
	}
	var req PATRequest
	if e := readJSONBody(w, r, reg.cfg.MaxBodyBytes, &req, true); e != nil {
		httpjson.WriteError(w, bodyAPIError(e))
		return
	}
	name, merr := checkClientName("name", req.Name)
	switch {
	case merr != nil:
		httpjson.WriteError(w, apiError(http.StatusBadRequest, CodeInvalidBody, merr.desc))
		return
	case name == "":
		httpjson.WriteError(w, apiError(http.StatusBadRequest, CodeInvalidBody, "name: required"))
		return
	case len(name) > maxPATName:
		httpjson.WriteError(w, apiError(http.StatusBadRequest, CodeInvalidBody, fmt.Sprintf("name: at most %d bytes", maxPATName)))
		return
	case len(req.Scopes) == 0:
		httpjson.WriteError(w, apiError(http.StatusBadRequest, CodeInvalidBody, "scopes: at least one is required"))
		return
	}
	var scopes []string
	for _, s := range req.Scopes {
		if !slices.Contains(reg.cfg.Scopes, s) {
			httpjson.WriteError(w, apiError(http.StatusBadRequest, "invalid_scope",
				fmt.Sprintf("scopes: %q is not allowed (allowed: %s)", truncate(s, 64), strings.Join(reg.cfg.Scopes, " "))))
			return
		}
		if !slices.Contains(scopes, s) {
			scopes = append(scopes, s)
		}
	}
	lifetime := reg.cfg.DefaultPATLifetime
	if req.ExpiresIn != nil {
		lifetime = time.Duration(*req.ExpiresIn) * time.Second
		if *req.ExpiresIn < int64(MinPATLifetime/time.Second) || *req.ExpiresIn > int64(reg.cfg.MaxPATLifetime/time.Second) {
			httpjson.WriteError(w, apiError(http.StatusBadRequest, CodeInvalidBody,
				fmt.Sprintf("expires_in: between %d and %d seconds", int64(MinPATLifetime/time.Second), int64(reg.cfg.MaxPATLifetime/time.Second))))
			return
		}
	}
	now := reg.cfg.Now()
	if reg.pats != nil && reg.cfg.MaxPATsPerPerson > 0 {
		list, err := reg.pats.PersonPATs(r.Context(), sess.Tenant, sess.PersonID)
		if err != nil {
			httpjson.WriteError(w, reg.storeAPIError(r.Context(), "listing tokens", err))
			return
		}
		active := 0
		for _, p := range list {
			if !p.Revoked && now.Before(p.Expires) {
				active++
			}
		}
		if active >= reg.cfg.MaxPATsPerPerson {
			httpjson.WriteError(w, apiError(http.StatusConflict, CodeTooManyPATs,
				fmt.Sprintf("you have %d active tokens, the most allowed; revoke one first", active)))
			return
		}
	}
	token, id, hashHex := accesstoken.NewPAT()
	hash, err := identitystore.ParseHash(hashHex)
	if err != nil {
		httpjson.WriteError(w, reg.storeAPIError(r.Context(), "issuing the token", err))
		return
	}
	p, err := reg.cfg.Store.IssuePAT(actorCtx(r.Context(), sess), identitystore.PATSpec{
		Tenant: sess.Tenant, ID: id, PersonID: sess.PersonID, Name: name,
		TokenSHA256: hash, Scopes: scopes, Expires: now.Add(lifetime).Truncate(time.Second),
	})
	if err != nil {
		httpjson.WriteError(w, reg.storeAPIError(r.Context(), "issuing the token", err))
		return
	}
	reg.log.InfoContext(r.Context(), "personal access token issued", "tenant", p.Tenant, "pat_id", p.ID, "person_id", p.PersonID, "scopes", p.Scopes, "expires", p.Expires)
	httpjson.Write(w, http.StatusCreated, IssuedPAT{PATInfo: patInfo(p, now), Token: token})
}

func (reg *Registrar) serveListPATs(w http.ResponseWriter, r *http.Request) {
	sess, ok := reg.person(w, r, false)
	if !ok {
		return
	}
	if reg.pats == nil {
		httpjson.WriteError(w, apiError(http.StatusNotImplemented, CodeUnavailable, "listing tokens is not configured"))
		return
	}
	list, err := reg.pats.PersonPATs(r.Context(), sess.Tenant, sess.PersonID)
	if err != nil {
		httpjson.WriteError(w, reg.storeAPIError(r.Context(), "listing tokens", err))
		return
	}
	now := reg.cfg.Now()
	out := PATList{PATs: []PATInfo{}}
	for _, p := range list {
		out.PATs = append(out.PATs, patInfo(p, now))
	}
	httpjson.Write(w, http.StatusOK, out)
}

func (reg *Registrar) serveRevokePAT(w http.ResponseWriter, r *http.Request) {
	sess, ok := reg.person(w, r, true)
	if !ok {
		return
	}
	id := r.PathValue("id")
	p, err := reg.cfg.Store.PAT(sess.Tenant, id)
	if err != nil || p.PersonID != sess.PersonID {
		if err != nil && !errors.Is(err, identitystore.ErrNotFound) {
			httpjson.WriteError(w, reg.storeAPIError(r.Context(), "revoking the token", err))
			return
		}
		// Another person's token is none of this person's business.
		httpjson.WriteError(w, apiError(http.StatusNotFound, CodeNotFound, "no such token"))
		return
	}
	if err := reg.cfg.Store.RevokePAT(actorCtx(r.Context(), sess), sess.Tenant, id, "revoked by its owner"); err != nil {
		httpjson.WriteError(w, reg.storeAPIError(r.Context(), "revoking the token", err))
		return
	}
	reg.log.InfoContext(r.Context(), "personal access token revoked", "tenant", sess.Tenant, "pat_id", id, "person_id", sess.PersonID)
	httpjson.NoStore(w.Header())
	w.WriteHeader(http.StatusNoContent)
}

// Errors of PATVerifier.Verify; each *PATError matches one with errors.Is.
var (
	// ErrInvalidPAT: malformed, unknown, or not the token on record.
	ErrInvalidPAT = errors.New("clientreg: invalid personal access token")
	// ErrPATExpired: past its expiry.
	ErrPATExpired = errors.New("clientreg: personal access token expired")
	// ErrPATRevoked: revoked, or its person's agents were revoked.
	ErrPATRevoked = errors.New("clientreg: personal access token revoked")
	// ErrInsufficientScope: the token lacks a required scope.
	ErrInsufficientScope = errors.New("clientreg: insufficient scope")
	// ErrPATUnavailable: the revocation projection is stale (fail closed).
	ErrPATUnavailable = errors.New("clientreg: personal access token verification unavailable")
)

// PATError is a refused personal access token. Its messages never contain
// the token.
type PATError struct {
	// Code is the RFC 6750 error: invalid_token, insufficient_scope or
	// temporarily_unavailable.
	Code        string
	Description string
	// Scope, for insufficient_scope, is every required scope (space-separated).
	Scope string
	kind  error
}

func (e *PATError) Error() string { return "clientreg: " + e.Code + ": " + e.Description }

// Unwrap is the sentinel the error matches.
func (e *PATError) Unwrap() error { return e.kind }

// HTTPStatus is 401 for invalid_token, 403 for insufficient_scope, 503 for
// temporarily_unavailable.
func (e *PATError) HTTPStatus() int {
	switch e.Code {
	case "insufficient_scope":
		return http.StatusForbidden
	case "temporarily_unavailable":
		return http.StatusServiceUnavailable
	}
	return http.StatusUnauthorized
}

func patError(kind error, desc string) *PATError {
	code := "invalid_token"
	switch kind {
	case ErrInsufficientScope:
		code = "insufficient_scope"
	case ErrPATUnavailable:
		code = "temporarily_unavailable"
	}
	return &PATError{Code: code, Description: desc, kind: kind}
}

// DefaultPATMaxStaleness is how stale the store may be before
// PATVerifier fails closed.
const DefaultPATMaxStaleness = time.Minute

// PATVerifier checks personal access tokens against the store.
type PATVerifier struct {
	Store *identitystore.Store
	// Tenants are the hosted tenants VerifyAny tries, in order.
	Tenants []string
	// MaxStaleness of the store before verification fails closed
	// (ErrPATUnavailable); default DefaultPATMaxStaleness, negative: not
	// checked.
	MaxStaleness time.Duration
	// Now is the clock; default time.Now.
	Now func() time.Time
}

// Verify checks token as a PAT of tenant holding every one of
// requiredScopes, and returns its record. Errors are *PATError.
func (v PATVerifier) Verify(ctx context.Context, tenant, token string, requiredScopes ...string) (identitystore.PAT, error) {
	id, hash, err := v.parse(token)
	if err != nil {
		return identitystore.PAT{}, err
	}
	if err := v.fresh(); err != nil {
		return identitystore.PAT{}, err
	}
	p, ok := v.lookup(tenant, id, hash)
	if !ok {
		return identitystore.PAT{}, patError(ErrInvalidPAT, "unknown personal access token")
	}
	return v.check(p, requiredScopes)
}

// VerifyAny is Verify for a token whose tenant the caller does not know:
// it tries each of Tenants (see the package doc).
func (v PATVerifier) VerifyAny(ctx context.Context, token string, requiredScopes ...string) (identitystore.PAT, error) {
	id, hash, err := v.parse(token)
	if err != nil {
		return identitystore.PAT{}, err
	}
	if err := v.fresh(); err != nil {
		return identitystore.PAT{}, err
	}
	for _, t := range v.Tenants {
		if p, ok := v.lookup(t, id, hash); ok {
			return v.check(p, requiredScopes)
		}
	}
	return identitystore.PAT{}, patError(ErrInvalidPAT, "unknown personal access token")
}

func (v PATVerifier) now() time.Time {
	if v.Now != nil {
		return v.Now()
	}
	return time.Now()
}

func (v PATVerifier) parse(token string) (string, identitystore.Hash, error) {
	if v.Store == nil {
		return "", identitystore.Hash{}, patError(ErrPATUnavailable, "no store configured")
	}
	id, hashHex, err := accesstoken.ParsePAT(token)
	if err != nil {
		return "", identitystore.Hash{}, patError(ErrInvalidPAT, "malformed personal access token")
	}
	hash, err := identitystore.ParseHash(hashHex)
	if err != nil {
		return "", identitystore.Hash{}, patError(ErrInvalidPAT, "malformed personal access token")
	}
	return id, hash, nil
}

func (v PATVerifier) fresh() error {
	ms := v.MaxStaleness
	if ms == 0 {
		ms = DefaultPATMaxStaleness
	}
	if ms < 0 {
		return nil
	}
	if err := v.Store.Fresh(ms); err != nil {
		return patError(ErrPATUnavailable, "revocation data is stale; try again shortly")
	}
	return nil
}

// lookup finds the PAT by id and compares the token's hash in constant
// time.
func (v PATVerifier) lookup(tenant, id string, hash identitystore.Hash) (identitystore.PAT, bool) {
	p, err := v.Store.PAT(tenant, id)
	if err != nil || p.ID != id {
		return identitystore.PAT{}, false
	}
	if !p.TokenSHA256.Equal(hash) {
		return identitystore.PAT{}, false
	}
	return p, true
}

func (v PATVerifier) check(p identitystore.PAT, required []string) (identitystore.PAT, error) {
	now := v.now()
	switch {
	case p.Revoked:
		return identitystore.PAT{}, patError(ErrPATRevoked, "personal access token revoked")
	case !now.Before(p.Expires):
		return identitystore.PAT{}, patError(ErrPATExpired, "personal access token expired")
	}
	if void, reason := v.Store.PATRevoked(p.Tenant, p.ID, now); void {
		return identitystore.PAT{}, patError(ErrPATRevoked, reason)
	}
	var missing []string
	for _, s := range required {
		if !slices.Contains(p.Scopes, s) {
			missing = append(missing, s)
		}
	}
	if len(missing) > 0 {
		e := patError(ErrInsufficientScope, "the token lacks scope "+strings.Join(missing, " "))
		e.Scope = strings.Join(required, " ")
		return identitystore.PAT{}, e
	}
	return p, nil
}

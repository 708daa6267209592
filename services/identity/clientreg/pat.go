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
	info, err := st.Info(ctx, jetstream.WithSubjectFilter(streams.IdentityFilter(tenant, streams.IdentityPAT)))
	if err != nil {
		return nil, fmt.Errorf("clientreg: listing PAT subjects: %w", err)
	}
	var out []identitystore.PAT
	for subj := range info.State.Subjects {
		_, _, id, _ := streams.ParseIdentitySubject(subj)
		p, err := l.Store.PAT(tenant, id)
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

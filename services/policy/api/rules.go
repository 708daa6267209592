package api

import (
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/alpd-project/alpd/internal/httpjson"
	"github.com/alpd-project/alpd/services/policy/rules"
	"github.com/alpd-project/alpd/services/policy/rulestore"
)

// ruleSetJSON is one party's set of one owner as stored (or its template,
// version 0, before the first write). Its version is also the ETag a
// write names in If-Match.
type ruleSetJSON struct {
	Party    rules.Party `json:"party"`
	Owner    string      `json:"owner"`
	Version  uint64      `json:"version"`
	Template bool        `json:"template"`
	Digest   string      `json:"digest"`
	Text     string      `json:"text"`
	// By is the kind of writer (person, agent, admin, operator) and Actor
	// its id; absent for the template.
	By             string    `json:"by,omitempty"`
	Actor          string    `json:"actor,omitempty"`
	Stored         time.Time `json:"stored,omitzero"`
	TighteningOnly bool      `json:"tightening_only,omitempty"`
}

func ruleSetView(v rulestore.Version) ruleSetJSON {
	out := ruleSetJSON{Party: v.Party, Owner: v.Owner, Version: v.Version, Template: v.Version == 0,
		Digest: v.Digest, Text: string(v.Text), Actor: v.Actor, Stored: v.Stored, TighteningOnly: v.TighteningOnly}
	if v.By != 0 {
		out.By = v.By.String()
	}
	return out
}

// storedJSON answers a write: the version stored.
type storedJSON struct {
	Party   rules.Party `json:"party"`
	Owner   string      `json:"owner"`
	Version uint64      `json:"version"`
}

// personParties are the sets a person owns.
var personParties = []rules.Party{rules.PartySender, rules.PartyRecipient}

// orgParties are the sets an organization owns, as /v1/admin/policies/{set}
// names them.
var orgParties = []rules.Party{rules.PartySenderOrg, rules.PartyRecipientOrg}

// partyOf reads a {party} or {set} path value among allowed.
func partyOf(v string, allowed []rules.Party) (rules.Party, *httpjson.Error) {
	for _, p := range allowed {
		if string(p) == v {
			return p, nil
		}
	}
	names := make([]string, len(allowed))
	for i, p := range allowed {
		names[i] = string(p)
	}
	return "", httpjson.Errorf(http.StatusNotFound, CodeUnknownSet, "no set %q here: the sets are %s", truncate(v), strings.Join(names, " and "))
}

// listRules is GET /v1/rules: the person's sender and recipient sets.
func (a *API) listRules(w http.ResponseWriter, r *http.Request) {
	c, ok := a.agentOrPerson(w, r, false, readScope)
	if !ok {
		return
	}
	out := struct {
		Sets []ruleSetJSON `json:"sets"`
	}{Sets: []ruleSetJSON{}}
	for _, p := range personParties {
		v, err := a.o.Rules.Get(c.Tenant, p, c.PersonID)
		if err != nil {
			a.fail(w, r, ruleError(err))
			return
		}
		out.Sets = append(out.Sets, ruleSetView(v))
	}
	httpjson.Write(w, http.StatusOK, out)
}

// getRules is GET /v1/rules/{party}.
func (a *API) getRules(w http.ResponseWriter, r *http.Request) {
	c, ok := a.agentOrPerson(w, r, false, readScope)
	if !ok {
		return
	}
	party, e := partyOf(r.PathValue("party"), personParties)
	if e != nil {
		a.fail(w, r, e)
		return
	}
	a.writeSet(w, r, c.Tenant, party, c.PersonID)
}

// putRules is PUT /v1/rules/{party}: the person's web session stores any
// valid set; an agent's token only a tightening one (rulestore.ByAgent).
func (a *API) putRules(w http.ResponseWriter, r *http.Request) {
	c, ok := a.agentOrPerson(w, r, true, writeScope)
	if !ok {
		return
	}
	party, e := partyOf(r.PathValue("party"), personParties)
	if e != nil {
		a.fail(w, r, e)
		return
	}
	by := rulestore.Author{Writer: rulestore.ByPerson, ID: c.PersonID}
	if c.AgentID != "" {
		by = rulestore.Author{Writer: rulestore.ByAgent, ID: c.AgentID}
	}
	a.storeSet(w, r, c.Tenant, party, c.PersonID, by)
}

// getOrgSet is GET /v1/admin/policies/{set}.
func (a *API) getOrgSet(w http.ResponseWriter, r *http.Request) {
	c, ok := a.admin(w, r, false)
	if !ok {
		return
	}
	party, e := partyOf(r.PathValue("set"), orgParties)
	if e != nil {
		a.fail(w, r, e)
		return
	}
	a.writeSet(w, r, c.Tenant, party, c.Tenant)
}

// putOrgSet is PUT /v1/admin/policies/{set}.
func (a *API) putOrgSet(w http.ResponseWriter, r *http.Request) {
	c, ok := a.admin(w, r, true)
	if !ok {
		return
	}
	party, e := partyOf(r.PathValue("set"), orgParties)
	if e != nil {
		a.fail(w, r, e)
		return
	}
	a.storeSet(w, r, c.Tenant, party, c.Tenant, rulestore.Author{Writer: rulestore.ByAdmin, ID: c.PersonID})
}

func (a *API) writeSet(w http.ResponseWriter, r *http.Request, tenant string, party rules.Party, owner string) {
	v, err := a.o.Rules.Get(tenant, party, owner)
	if err != nil {
		a.fail(w, r, ruleError(err))
		return
	}
	w.Header().Set("ETag", etag(v.Version))
	httpjson.Write(w, http.StatusOK, ruleSetView(v))
}

// storeSet stores the body as the next version of the set, if If-Match
// names the current one.
func (a *API) storeSet(w http.ResponseWriter, r *http.Request, tenant string, party rules.Party, owner string, by rulestore.Author) {
	expect, e := ifMatch(r)
	if e != nil {
		a.fail(w, r, e)
		return
	}
	text, err := io.ReadAll(r.Body)
	if err != nil {
		a.fail(w, r, bodyError(err))
		return
	}
	version, err := a.o.Rules.Put(r.Context(), tenant, party, owner, text, by, expect)
	if err != nil {
		e := ruleError(err)
		if e.Status < 500 {
			a.log.InfoContext(r.Context(), "rule set refused", "tenant", tenant, "party", party, "owner", owner, "writer", by.Writer.String(), "code", e.Code)
		}
		a.fail(w, r, e)
		return
	}
	a.log.InfoContext(r.Context(), "rule set stored", "tenant", tenant, "party", party, "owner", owner, "version", version, "writer", by.Writer.String(), "actor", by.ID)
	w.Header().Set("ETag", etag(version))
	httpjson.Write(w, http.StatusOK, storedJSON{Party: party, Owner: owner, Version: version})
}

func etag(version uint64) string { return `"` + strconv.FormatUint(version, 10) + `"` }

// ifMatch reads the version a write replaces: If-Match with the ETag of
// the set read ("0" for the template). Without it a write could silently
// undo someone else's, so it is required (428).
func ifMatch(r *http.Request) (uint64, *httpjson.Error) {
	vals := r.Header.Values("If-Match")
	if len(vals) == 0 {
		return 0, httpjson.Errorf(http.StatusPreconditionRequired, CodePreconditionRequired,
			`name the version you edited: If-Match: "<version>" (the ETag of the GET; "0" for the template)`)
	}
	v := strings.TrimSpace(vals[0])
	n, err := strconv.ParseUint(strings.Trim(v, `"`), 10, 64)
	if len(vals) > 1 || len(v) < 3 || v[0] != '"' || v[len(v)-1] != '"' || err != nil || etag(n) != v {
		return 0, httpjson.Errorf(http.StatusBadRequest, CodeInvalidIfMatch, `If-Match must be one version in quotes, as the ETag of the GET: "3"`)
	}
	return n, nil
}

func truncate(s string) string {
	if len(s) > 40 {
		return s[:40] + "…"
	}
	return s
}

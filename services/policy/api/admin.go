package api

import (
	"encoding/json"
	"io"
	"net/http"
	"slices"

	"github.com/alpd-project/alpd/internal/httpjson"
	"github.com/alpd-project/alpd/internal/msgtypes"
	"github.com/alpd-project/alpd/services/policy/relationships"
)

// typeJSON describes one message type; Schema only when one type is asked
// for.
type typeJSON struct {
	Name    string          `json:"name"`
	Owner   string          `json:"owner,omitempty"`
	Builtin bool            `json:"builtin"`
	Digest  string          `json:"digest"`
	Commits []string        `json:"commits,omitempty"`
	Schema  json.RawMessage `json:"schema,omitempty"`
}

func typeView(t *msgtypes.Type, withSchema bool) typeJSON {
	v := typeJSON{Name: t.Name(), Owner: t.Owner(), Builtin: t.Builtin(), Digest: t.Digest(), Commits: t.Commits()}
	if withSchema {
		v.Schema = t.Schema()
	}
	return v
}

// listTypes is GET /v1/admin/types: the types the admin's organization
// registered, by name.
func (a *API) listTypes(w http.ResponseWriter, r *http.Request) {
	c, ok := a.admin(w, r, false)
	if !ok {
		return
	}
	reg := a.o.Types.Registry()
	out := struct {
		Types []typeJSON `json:"types"`
	}{Types: []typeJSON{}}
	for _, name := range reg.Names() {
		if t, ok := reg.Lookup(name); ok && t.Owner() == c.Tenant {
			out.Types = append(out.Types, typeView(t, false))
		}
	}
	httpjson.Write(w, http.StatusOK, out)
}

// getType is GET /v1/admin/types/{name...}: a built-in type or one of the
// organization's, with its schema. Another organization's types are none
// of this admin's business: 404 like an unknown name.
func (a *API) getType(w http.ResponseWriter, r *http.Request) {
	c, ok := a.admin(w, r, false)
	if !ok {
		return
	}
	name := r.PathValue("name")
	t, found := a.o.Types.Registry().Lookup(name)
	if !found || (!t.Builtin() && t.Owner() != c.Tenant) {
		a.fail(w, r, httpjson.Errorf(http.StatusNotFound, CodeTypeNotFound, "no message type %q", truncate(name)))
		return
	}
	httpjson.Write(w, http.StatusOK, typeView(t, true))
}

// putType is PUT /v1/admin/types/{name...} with the JSON Schema as body:
// 201 when registered, 200 when the identical schema already was.
// Refusals are the registry's codes with the JSON pointer into the schema
// (unclassified_property, remote_ref, name_collides_with_builtin,
// name_not_namespaced, type_exists …); nothing is stored.
func (a *API) putType(w http.ResponseWriter, r *http.Request) {
	c, ok := a.admin(w, r, true)
	if !ok {
		return
	}
	name := r.PathValue("name")
	schema, err := io.ReadAll(r.Body)
	if err != nil {
		a.fail(w, r, bodyError(err))
		return
	}
	_, existed := a.o.Types.Registry().Lookup(name)
	t, err := a.o.Types.Register(r.Context(), c.Tenant, name, schema, c.actor())
	if err != nil {
		e := typeError(err)
		if e.Status < 500 {
			a.log.InfoContext(r.Context(), "message type refused", "tenant", c.Tenant, "type", truncate(name), "code", e.Code, "pointer", e.Pointer)
		}
		a.fail(w, r, e)
		return
	}
	status := http.StatusCreated
	if existed {
		status = http.StatusOK
	}
	a.log.InfoContext(r.Context(), "message type registered", "tenant", c.Tenant, "type", t.Name(), "digest", t.Digest(), "by", c.PersonID)
	httpjson.Write(w, status, typeView(t, false))
}

// orgRuleJSON is one pre-approved relationship, with its id.
type orgRuleJSON struct {
	ID string `json:"id"`
	relationships.OrgRule
}

type orgRulesJSON struct {
	Rules []orgRuleJSON `json:"rules"`
}

func (a *API) writeOrgRules(w http.ResponseWriter, r *http.Request, tenant string) {
	list, err := a.o.Relationships.OrgRules(tenant)
	if err != nil {
		a.fail(w, r, relError(err))
		return
	}
	out := orgRulesJSON{Rules: []orgRuleJSON{}}
	for _, rule := range list {
		out.Rules = append(out.Rules, orgRuleJSON{ID: relationships.OrgRuleID(tenant, rule), OrgRule: rule})
	}
	httpjson.Write(w, http.StatusOK, out)
}

// getOrgRules is GET /v1/admin/relationships.
func (a *API) getOrgRules(w http.ResponseWriter, r *http.Request) {
	if c, ok := a.admin(w, r, false); ok {
		a.writeOrgRules(w, r, c.Tenant)
	}
}

// putOrgRules is PUT /v1/admin/relationships {"rules": [...]}: the
// organization's pre-approved relationships become exactly the list
// (rules not in it are lifted), each with the commit actions it also
// pre-approves ("commits": ["meeting"], sorted and deduplicated). Every rule is checked before any is set,
// so a bad one changes nothing; each change is its own event, so a write
// cut short (NATS gone) is finished by sending it again.
func (a *API) putOrgRules(w http.ResponseWriter, r *http.Request) {
	c, ok := a.admin(w, r, true)
	if !ok {
		return
	}
	var in struct {
		Rules []relationships.OrgRule `json:"rules"`
	}
	if e := readJSON(r, &in); e != nil {
		a.fail(w, r, e)
		return
	}
	if in.Rules == nil {
		a.fail(w, r, badRequest(`the body is {"rules": [...]}; an empty list lifts every rule`))
		return
	}
	want := map[string]relationships.OrgRule{}
	for i, rule := range in.Rules {
		norm, err := relationships.CheckOrgRule(rule)
		if err != nil {
			e := relError(err)
			e.Pointer = "/rules/" + itoa(uint64(i))
			a.fail(w, r, e)
			return
		}
		id := relationships.OrgRuleID(c.Tenant, norm)
		if _, twice := want[id]; twice {
			// Its commits are one list: two would leave which one counts
			// to the order of the body.
			e := badRequest("the same relationship twice; list its commits once")
			e.Pointer = "/rules/" + itoa(uint64(i))
			a.fail(w, r, e)
			return
		}
		want[id] = norm
	}
	have, err := a.o.Relationships.OrgRules(c.Tenant)
	if err != nil {
		a.fail(w, r, relError(err))
		return
	}
	by := c.actor()
	for _, rule := range have {
		if _, keep := want[relationships.OrgRuleID(c.Tenant, rule)]; !keep {
			if err := a.o.Relationships.SetOrgRule(r.Context(), c.Tenant, rule, false, by); err != nil {
				a.fail(w, r, relError(err))
				return
			}
		}
	}
	ids := make([]string, 0, len(want))
	for id := range want {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	for _, id := range ids {
		if err := a.o.Relationships.SetOrgRule(r.Context(), c.Tenant, want[id], true, by); err != nil {
			a.fail(w, r, relError(err))
			return
		}
	}
	a.log.InfoContext(r.Context(), "organization relationships set", "tenant", c.Tenant, "rules", len(want), "by", c.PersonID)
	a.writeOrgRules(w, r, c.Tenant)
}

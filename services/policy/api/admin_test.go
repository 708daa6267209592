package api_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
)

const egress = `@id("egress-connected")
@reason("egress_permits")
permit (principal, action == Alp::Action::"share_field", resource)
when { context.relationship == "connected" };
`

// An organization's admin (the admin role in their session) reads and
// writes the organization's sets; anyone else is refused and nothing is
// stored.
func TestAdminPolicies(t *testing.T) {
	s := newSite(t)
	adm, ana := s.signIn("adm"), s.signIn("ana")

	v := getSet(t, adm.get("/v1/admin/policies/sender_org"))
	if v.Version != 0 || !v.Template || v.Owner != tenant || !strings.Contains(v.Text, "egress-confidential-external") {
		t.Fatalf("GET sender_org: %+v; want the template of %s", v, tenant)
	}
	before := s.events()
	want(t, "a person without the role reads", ana.get("/v1/admin/policies/sender_org"), http.StatusForbidden, "admin_role_required")
	want(t, "a person without the role writes", ana.write(http.MethodPut, "/v1/admin/policies/sender_org", []byte(egress), "If-Match", `"0"`), http.StatusForbidden, "admin_role_required")
	want(t, "the admin without the CSRF token", adm.forged(http.MethodPut, "/v1/admin/policies/sender_org", []byte(egress), "If-Match", `"0"`), http.StatusForbidden, "csrf_token_invalid")
	want(t, "no session", s.anonymous(http.MethodGet, "/v1/admin/policies/sender_org", nil), http.StatusUnauthorized, "signin_required")
	want(t, "an agent's token", ana.pat("alp.read", "alp.send").do(http.MethodGet, "/v1/admin/policies/sender_org", nil), http.StatusUnauthorized, "signin_required")
	want(t, "a person's set", adm.write(http.MethodPut, "/v1/admin/policies/sender", []byte(egress), "If-Match", `"0"`), http.StatusNotFound, "unknown_set")
	a := adm.write(http.MethodPut, "/v1/admin/policies/sender_org", []byte("@id(\"x\")\npermit (principal, action, resource);\n"), "If-Match", `"0"`)
	want(t, "a policy without @reason", a, http.StatusUnprocessableEntity, "missing_reason")
	a = adm.write(http.MethodPut, "/v1/admin/policies/recipient_org", []byte("@id(\"x\")\n@reason(\"r\")\npermit (principal, action, resource) when { context.recipient.department == \"x\" };\n"), "If-Match", `"0"`)
	want(t, "an unknown attribute", a, http.StatusUnprocessableEntity, "unknown_attribute")
	want(t, "oversized", adm.write(http.MethodPut, "/v1/admin/policies/sender_org", []byte(strings.Repeat(" ", 64<<10+1)), "If-Match", `"0"`), http.StatusRequestEntityTooLarge, "body_too_large")
	s.unchanged("refused org writes", before)

	a = adm.write(http.MethodPut, "/v1/admin/policies/sender_org", []byte(egress), "If-Match", `"0"`)
	want(t, "the admin writes", a, http.StatusOK, "")
	if v := getSet(t, adm.get("/v1/admin/policies/sender_org")); v.Version != 1 || v.By != "admin" || v.Actor != adm.ID || v.Text != egress {
		t.Fatalf("after the admin's write: %+v", v)
	}
	want(t, "a stale write", adm.write(http.MethodPut, "/v1/admin/policies/sender_org", []byte(egress), "If-Match", `"0"`), http.StatusConflict, "version_conflict")
}

// expense is a valid organization's type; unclassified and remote are not.
const (
	expense = `{"type":"object","properties":{"amount":{"type":"string","maxLength":20,"x-alp-class":"internal"}},"required":["amount"],"additionalProperties":false}`
)

// The admin registers the organization's message types: each refusal is
// the registry's code with the JSON pointer into the schema, and stores
// nothing.
func TestAdminTypes(t *testing.T) {
	s := newSite(t)
	adm, ana := s.signIn("adm"), s.signIn("ana")
	const name = tenant + "/expense.approval/v1"

	before := s.events()
	for _, c := range []struct {
		what, name, schema string
		status             int
		code, pointer      string
	}{
		{"unclassified field", tenant + "/bad/v1", `{"type":"object","properties":{"memo":{"type":"string","maxLength":9}},"additionalProperties":false}`,
			422, "unclassified_property", "/properties/memo"},
		{"remote $ref", tenant + "/bad/v1", `{"type":"object","properties":{"a":{"$ref":"https://evil.example/s.json","x-alp-class":"public"}},"additionalProperties":false}`,
			422, "remote_ref", "/properties/a/$ref"},
		{"built-in name", "note/v1", expense, 409, "name_collides_with_builtin", ""},
		{"another organization's name", "other.example/x/v1", expense, 400, "name_not_namespaced", ""},
		{"not JSON", tenant + "/bad/v1", `{"type":`, 422, "invalid_schema", ""},
	} {
		a := adm.write(http.MethodPut, "/v1/admin/types/"+c.name, []byte(c.schema), "Content-Type", "application/schema+json")
		want(t, c.what, a, c.status, c.code)
		var p struct {
			Pointer string `json:"pointer"`
		}
		if a.decode(t, &p); c.pointer != "" && p.Pointer != c.pointer {
			t.Errorf("%s: pointer %q, want %q (%s)", c.what, p.Pointer, c.pointer, a)
		}
	}
	big := fmt.Sprintf(`{"type":"object","description":%q}`, strings.Repeat("x", 64<<10))
	want(t, "an oversized schema", adm.write(http.MethodPut, "/v1/admin/types/"+name, []byte(big)), http.StatusRequestEntityTooLarge, "body_too_large")
	want(t, "a person without the role", ana.write(http.MethodPut, "/v1/admin/types/"+name, []byte(expense)), http.StatusForbidden, "admin_role_required")
	want(t, "no CSRF token", adm.forged(http.MethodPut, "/v1/admin/types/"+name, []byte(expense)), http.StatusForbidden, "csrf_token_invalid")
	s.unchanged("refused types", before)

	want(t, "register", adm.write(http.MethodPut, "/v1/admin/types/"+name, []byte(expense)), http.StatusCreated, "")
	want(t, "register again", adm.write(http.MethodPut, "/v1/admin/types/"+name, []byte(expense)), http.StatusOK, "")
	want(t, "another schema under the name", adm.write(http.MethodPut, "/v1/admin/types/"+name, []byte(strings.Replace(expense, "20", "21", 1))), http.StatusConflict, "type_exists")

	var list struct {
		Types []struct {
			Name    string `json:"name"`
			Builtin bool   `json:"builtin"`
		} `json:"types"`
	}
	a := adm.get("/v1/admin/types")
	if a.decode(t, &list); len(list.Types) != 1 || list.Types[0].Name != name || list.Types[0].Builtin {
		t.Fatalf("GET /v1/admin/types: %s", a)
	}
	var one struct {
		Name   string          `json:"name"`
		Schema json.RawMessage `json:"schema"`
	}
	a = adm.get("/v1/admin/types/" + name)
	if a.decode(t, &one); one.Name != name || !strings.Contains(string(one.Schema), "x-alp-class") {
		t.Fatalf("GET the type: %s", a)
	}
	want(t, "GET a built-in type", adm.get("/v1/admin/types/note/v1"), http.StatusOK, "")
	want(t, "GET an unknown type", adm.get("/v1/admin/types/"+tenant+"/nope/v1"), http.StatusNotFound, "type_not_found")
}

// The admin sets the organization's pre-approved relationships as a
// whole list; a bad rule sets none.
func TestAdminRelationships(t *testing.T) {
	s := newSite(t)
	adm, ana := s.signIn("adm"), s.signIn("ana")
	type rule struct {
		ID     string `json:"id"`
		Kind   string `json:"kind"`
		Role   string `json:"role"`
		Domain string `json:"domain"`
	}
	var got struct {
		Rules []rule `json:"rules"`
	}
	a := adm.get("/v1/admin/relationships")
	if a.decode(t, &got); a.Status != http.StatusOK || len(got.Rules) != 0 {
		t.Fatalf("GET: %s; want no rules", a)
	}
	a = adm.write(http.MethodPut, "/v1/admin/relationships", []byte(`{"rules":[{"kind":"same_org"},{"kind":"role_may_receive_from","role":"finance","domain":"Partner.Example"}]}`))
	want(t, "set two rules", a, http.StatusOK, "")
	got.Rules = nil
	if a.decode(t, &got); len(got.Rules) != 2 {
		t.Fatalf("after setting: %s", a)
	}
	for _, r := range got.Rules {
		if r.ID == "" || (r.Kind == "role_may_receive_from" && r.Domain != "partner.example") {
			t.Errorf("rule %+v: want an id and the domain in lower case", r)
		}
	}

	before := s.events()
	// A new rule before the bad one: it must not be set either (and the
	// partner rule left out must not be lifted).
	a = adm.write(http.MethodPut, "/v1/admin/relationships", []byte(`{"rules":[{"kind":"role_may_receive_from","role":"sales","domain":"y.example"},{"kind":"role_may_receive_from","role":"","domain":"x.example"}]}`))
	want(t, "a bad rule", a, http.StatusBadRequest, "invalid_request")
	var p struct {
		Pointer string `json:"pointer"`
	}
	if a.decode(t, &p); p.Pointer != "/rules/1" {
		t.Errorf("bad rule: pointer %q, want /rules/1", p.Pointer)
	}
	want(t, "an unknown kind", adm.write(http.MethodPut, "/v1/admin/relationships", []byte(`{"rules":[{"kind":"everyone"}]}`)), http.StatusBadRequest, "invalid_request")
	want(t, "no list", adm.write(http.MethodPut, "/v1/admin/relationships", []byte(`{}`)), http.StatusBadRequest, "invalid_request")
	want(t, "a person without the role", ana.write(http.MethodPut, "/v1/admin/relationships", []byte(`{"rules":[]}`)), http.StatusForbidden, "admin_role_required")
	want(t, "no CSRF token", adm.forged(http.MethodPut, "/v1/admin/relationships", []byte(`{"rules":[]}`)), http.StatusForbidden, "csrf_token_invalid")
	want(t, "oversized", adm.write(http.MethodPut, "/v1/admin/relationships", []byte(`{"rules":[`+strings.Repeat(`{"kind":"same_org"},`, 4000)+`{"kind":"same_org"}]}`)), http.StatusRequestEntityTooLarge, "body_too_large")
	s.unchanged("refused relationships", before)

	want(t, "a bad commit action", adm.write(http.MethodPut, "/v1/admin/relationships", []byte(`{"rules":[{"kind":"same_org","commits":["Meeting"]}]}`)), http.StatusBadRequest, "invalid_request")
	want(t, "too many commit actions", adm.write(http.MethodPut, "/v1/admin/relationships", []byte(`{"rules":[{"kind":"same_org","commits":["a","b","c","d","e","f","g","h","i"]}]}`)), http.StatusBadRequest, "invalid_request")
	a = adm.write(http.MethodPut, "/v1/admin/relationships", []byte(`{"rules":[{"kind":"same_org"},{"kind":"same_org","commits":["meeting"]}]}`))
	want(t, "one relationship twice", a, http.StatusBadRequest, "invalid_request")
	if a.decode(t, &p); p.Pointer != "/rules/1" {
		t.Errorf("twice: pointer %q, want /rules/1", p.Pointer)
	}
	s.unchanged("refused commits", before)

	// Commit actions: validated, sorted, deduplicated; changing them
	// changes the same rule.
	var withCommits struct {
		Rules []struct {
			ID      string   `json:"id"`
			Commits []string `json:"commits"`
		} `json:"rules"`
	}
	a = adm.write(http.MethodPut, "/v1/admin/relationships", []byte(`{"rules":[{"kind":"same_org","commits":["payment","meeting","meeting"]}]}`))
	want(t, "commits", a, http.StatusOK, "")
	if a.decode(t, &withCommits); len(withCommits.Rules) != 1 || strings.Join(withCommits.Rules[0].Commits, ",") != "meeting,payment" {
		t.Fatalf("with commits: %s", a)
	}
	first := withCommits.Rules[0].ID
	a = adm.write(http.MethodPut, "/v1/admin/relationships", []byte(`{"rules":[{"kind":"same_org","commits":["meeting"]}]}`))
	want(t, "other commits", a, http.StatusOK, "")
	withCommits.Rules = nil
	if a.decode(t, &withCommits); len(withCommits.Rules) != 1 || withCommits.Rules[0].ID != first ||
		strings.Join(withCommits.Rules[0].Commits, ",") != "meeting" {
		t.Fatalf("commits changed: %s", a)
	}

	// The list is the whole truth: what it leaves out is lifted.
	a = adm.write(http.MethodPut, "/v1/admin/relationships", []byte(`{"rules":[{"kind":"same_org"}]}`))
	want(t, "set one rule", a, http.StatusOK, "")
	got.Rules = nil
	if a.decode(t, &got); len(got.Rules) != 1 || got.Rules[0].Kind != "same_org" {
		t.Fatalf("after setting one: %s", a)
	}
}

package api_test

import (
	"net/http"
	"strings"
	"testing"
)

// A valid recipient set, and the same with one forbid more (a tightening)
// and with its permit changed (a loosening).
const (
	recipientSet = `@id("accept-connected")
@reason("recipient_accepts")
permit (principal, action == Alp::Action::"share_field", resource)
when { context.relationship == "connected" };
`
	tightened = recipientSet + `
@id("no-freetext")
@reason("freetext_not_opted_in")
forbid (principal, action == Alp::Action::"share_field", resource)
when { resource.freetext };
`
	loosened = `@id("accept-connected")
@reason("recipient_accepts")
permit (principal, action == Alp::Action::"share_field", resource);
`
)

type ruleSet struct {
	Party          string `json:"party"`
	Owner          string `json:"owner"`
	Version        uint64 `json:"version"`
	Template       bool   `json:"template"`
	Text           string `json:"text"`
	By             string `json:"by"`
	Actor          string `json:"actor"`
	TighteningOnly bool   `json:"tightening_only"`
}

func getSet(t *testing.T, a answer) ruleSet {
	t.Helper()
	want(t, "GET set", a, http.StatusOK, "")
	var v ruleSet
	a.decode(t, &v)
	return v
}

// A person reads and writes their own sets with their web session; every
// refused write answers its code (line:column for Cedar) and stores
// nothing.
func TestPersonRules(t *testing.T) {
	s := newSite(t)
	ana := s.signIn("ana")

	var all struct {
		Sets []ruleSet `json:"sets"`
	}
	a := ana.get("/v1/rules")
	want(t, "GET /v1/rules", a, http.StatusOK, "")
	a.decode(t, &all)
	if len(all.Sets) != 2 || all.Sets[0].Party != "sender" || all.Sets[1].Party != "recipient" ||
		!all.Sets[1].Template || all.Sets[1].Version != 0 || all.Sets[1].Owner != ana.ID || !strings.Contains(all.Sets[1].Text, "freetext-off") {
		t.Fatalf("GET /v1/rules: %s; want the sender and recipient templates at version 0", a)
	}
	if a := ana.get("/v1/rules/recipient"); a.Header.Get("ETag") != `"0"` {
		t.Fatalf("GET /v1/rules/recipient: ETag %q, want \"0\"", a.Header.Get("ETag"))
	}

	put := func(text, ifMatch string) answer {
		return ana.write(http.MethodPut, "/v1/rules/recipient", []byte(text), "Content-Type", "text/plain", "If-Match", ifMatch)
	}
	a = put(recipientSet, `"0"`)
	want(t, "PUT the first version", a, http.StatusOK, "")
	if a.Header.Get("ETag") != `"1"` || !strings.Contains(string(a.Body), `"version":1`) {
		t.Fatalf("PUT: %s ETag %q; want version 1", a, a.Header.Get("ETag"))
	}
	if v := getSet(t, ana.get("/v1/rules/recipient")); v.Version != 1 || v.Text != recipientSet || v.By != "person" || v.Actor != ana.ID {
		t.Fatalf("after the PUT: %+v", v)
	}

	before := s.events()
	for _, c := range []struct {
		name, text, ifMatch string
		status              int
		code                string
		line                bool
	}{
		{"malformed Cedar", "@id(\"a\")\n@reason(\"r\")\npermit (principal, action, resource)\nwhen { resource.class = \"public\" };\n", `"1"`, 422, "cedar_parse", true},
		{"unknown attribute", "@id(\"a\")\n@reason(\"r\")\nforbid (principal, action == Alp::Action::\"share_field\", resource)\nwhen { resource.colour == \"red\" };\n", `"1"`, 422, "unknown_attribute", true},
		{"policy without @id", "@reason(\"r\")\nforbid (principal, action, resource);\n", `"1"`, 422, "missing_id", true},
		{"stale version", tightened, `"0"`, 409, "version_conflict", false},
		{"no If-Match", tightened, "", 428, "precondition_required", false},
		{"If-Match not a version", tightened, `W/"1"`, 400, "invalid_if_match", false},
	} {
		var a answer
		if c.ifMatch == "" {
			a = ana.write(http.MethodPut, "/v1/rules/recipient", []byte(c.text))
		} else {
			a = put(c.text, c.ifMatch)
		}
		want(t, c.name, a, c.status, c.code)
		if c.line {
			ps := a.problems(t)
			if len(ps) == 0 || ps[0]["code"] != c.code || ps[0]["line"] == nil || ps[0]["column"] == nil {
				t.Errorf("%s: problems %v; want %s with line and column", c.name, ps, c.code)
			}
		}
		if c.code == "version_conflict" {
			if ps := a.problems(t); len(ps) != 1 || ps[0]["current"] != 1.0 || ps[0]["expected"] != 0.0 {
				t.Errorf("version conflict: problems %v; want current 1, expected 0", ps)
			}
		}
		s.unchanged(c.name, before)
	}
	want(t, "PUT without the CSRF token", ana.forged(http.MethodPut, "/v1/rules/recipient", []byte(tightened), "If-Match", `"1"`), 403, "csrf_token_invalid")
	a = s.anonymous(http.MethodPut, "/v1/rules/recipient", []byte(tightened), "If-Match", `"1"`)
	want(t, "PUT with no credential", a, 401, "")
	if !strings.Contains(a.Header.Get("WWW-Authenticate"), "Bearer") {
		t.Errorf("401 without a bearer challenge: %v", a.Header)
	}
	want(t, "PUT over the size limit", put(strings.Repeat("// x\n", 14000), `"1"`), 413, "body_too_large")
	want(t, "PUT an organization's set", ana.write(http.MethodPut, "/v1/rules/sender_org", []byte(recipientSet), "If-Match", `"0"`), 404, "unknown_set")
	want(t, "PATCH", ana.write(http.MethodPatch, "/v1/rules/recipient", nil), 405, "method_not_allowed")
	want(t, "an unknown path", ana.get("/v1/rules/recipient/history"), 404, "not_found")
	s.unchanged("refused writes", before)
	if v := getSet(t, ana.get("/v1/rules/recipient")); v.Version != 1 || v.Text != recipientSet {
		t.Fatalf("after the refusals: %+v; want version 1 unchanged", v)
	}

	// Another person's session never reaches ana's sets: the owner is the
	// session's person.
	lee := s.signIn("lee")
	if v := getSet(t, lee.get("/v1/rules/recipient")); v.Owner != lee.ID || v.Version != 0 {
		t.Fatalf("lee reads %+v; want lee's own template", v)
	}
}

// An agent's token reads its person's sets (alp.read) and may only tighten
// them (alp.send): a loosening is refused with loosening_refused and
// stores nothing; a read-only token writes nothing at all.
func TestAgentRules(t *testing.T) {
	s := newSite(t)
	ana := s.signIn("ana")
	want(t, "PUT", ana.write(http.MethodPut, "/v1/rules/recipient", []byte(recipientSet), "If-Match", `"0"`), http.StatusOK, "")

	ag := ana.pat("alp.read", "alp.send")
	if v := getSet(t, ag.do(http.MethodGet, "/v1/rules/recipient", nil)); v.Version != 1 || v.Owner != ana.ID || v.Text != recipientSet {
		t.Fatalf("the agent reads %+v; want ana's version 1", v)
	}
	a := ag.do(http.MethodPut, "/v1/rules/recipient", []byte(tightened), "If-Match", `"1"`)
	want(t, "the agent tightens", a, http.StatusOK, "")
	v := getSet(t, ana.get("/v1/rules/recipient"))
	if v.Version != 2 || v.By != "agent" || !strings.HasPrefix(v.Actor, "pat_") || !v.TighteningOnly {
		t.Fatalf("after the agent's write: %+v; want version 2 by the agent, tightening only", v)
	}

	before := s.events()
	a = ag.do(http.MethodPut, "/v1/rules/recipient", []byte(loosened), "If-Match", `"2"`)
	want(t, "the agent loosens", a, http.StatusForbidden, "loosening_refused")
	if ps := a.problems(t); len(ps) == 0 || ps[0]["code"] != "loosening_refused" {
		t.Errorf("loosening: problems %v", ps)
	}
	// Dropping the forbid it added is loosening too.
	want(t, "the agent drops a forbid", ag.do(http.MethodPut, "/v1/rules/recipient", []byte(recipientSet), "If-Match", `"2"`), http.StatusForbidden, "loosening_refused")
	want(t, "the agent writes an organization's set", ag.do(http.MethodPut, "/v1/rules/sender_org", []byte(tightened), "If-Match", `"0"`), http.StatusNotFound, "unknown_set")
	reader := ana.pat("alp.read")
	want(t, "a read-only token writes", reader.do(http.MethodPut, "/v1/rules/recipient", []byte(tightened+"\n"), "If-Match", `"2"`), http.StatusForbidden, "insufficient_scope")
	want(t, "a bad token", s.anonymous(http.MethodGet, "/v1/rules", nil, "Authorization", "Bearer alppat_nope_nope"), http.StatusUnauthorized, "")
	s.unchanged("the agents' refused writes", before)
	if v := getSet(t, ana.get("/v1/rules/recipient")); v.Version != 2 {
		t.Fatalf("after the refusals: version %d, want 2", v.Version)
	}
	// The person may loosen their own rules.
	want(t, "the person loosens", ana.write(http.MethodPut, "/v1/rules/recipient", []byte(loosened), "If-Match", `"2"`), http.StatusOK, "")
}

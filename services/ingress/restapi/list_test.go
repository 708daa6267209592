package restapi_test

import (
	"encoding/base64"
	"encoding/json"
	"net/http"
	"net/url"
	"slices"
	"testing"

	"github.com/alpd-project/alpd/services/ingress/restapi"
)

// names walks every page of the types with limit and returns the names.
func (r *rig) typeNames(t *testing.T, token string, limit string) []string {
	t.Helper()
	var names []string
	after := ""
	for range 100 {
		q := url.Values{"limit": {limit}}
		if after != "" {
			q.Set("after", after)
		}
		a := r.do(t, http.MethodGet, restapi.PathTypes+"?"+q.Encode(), token, nil)
		if a.status != http.StatusOK {
			t.Fatalf("types page: %s", a)
		}
		var page struct {
			Items []struct {
				Name, Schema string
			}
			Next string
		}
		if err := json.Unmarshal(a.body, &page); err != nil {
			t.Fatal(err)
		}
		for _, it := range page.Items {
			names = append(names, it.Name)
		}
		if page.Next == "" {
			return names
		}
		after = page.Next
	}
	t.Fatal("the pages never end")
	return nil
}

// The types come in cursor pages that add up to the whole list, each once.
func TestTypesPaginate(t *testing.T) {
	r := newRig(t, restapi.Config{})
	all := r.typeNames(t, r.anaPAT, "100")
	if !slices.Contains(all, "meeting.request/v1") || !slices.Contains(all, "connection.request/v1") || !slices.IsSorted(all) {
		t.Fatalf("types: %v", all)
	}
	if paged := r.typeNames(t, r.anaPAT, "2"); !slices.Equal(paged, all) {
		t.Errorf("pages of 2: %v, want %v", paged, all)
	}
	connCursor := base64.RawURLEncoding.EncodeToString([]byte(`{"k":"connections","a":"x"}`))
	for name, q := range map[string]string{
		"a cursor that is no base64":   "after=!!!",
		"a cursor that is no JSON":     "after=" + base64.RawURLEncoding.EncodeToString([]byte("nope")),
		"another list's cursor":        "after=" + connCursor,
		"an oversized cursor":          "after=" + base64.RawURLEncoding.EncodeToString(make([]byte, 2000)),
		"limit 0":                      "limit=0",
		"limit over the maximum":       "limit=101",
		"a limit that is not a number": "limit=ten",
	} {
		a := r.do(t, http.MethodGet, restapi.PathTypes+"?"+q, r.anaPAT, nil)
		want := restapi.CodeInvalidCursor
		if q[:5] == "limit" {
			want = restapi.CodeInvalidLimit
		}
		if a.status != http.StatusBadRequest || a.code() != want {
			t.Errorf("%s: %s", name, a)
		}
	}
	if a := r.do(t, http.MethodGet, restapi.PathConnections+"?after="+base64.RawURLEncoding.EncodeToString([]byte(`{"k":"types","a":"x"}`)), r.anaPAT, nil); a.code() != restapi.CodeInvalidCursor {
		t.Errorf("a types cursor on the connections: %s", a)
	}
}

// A type's JSON Schema is served as it is, under its name with slashes as
// they are or escaped; another organization's types are not shown.
func TestTypeSchema(t *testing.T) {
	r := newRig(t, restapi.Config{})
	for _, path := range []string{restapi.PathTypes + "/meeting.request%2Fv1", restapi.PathTypes + "/meeting.request/v1"} {
		// The escaped form is the documented one; slashes as they are
		// (what a person types) are a convenience the document cannot
		// express, so that request bypasses the checker.
		a := r.do(t, http.MethodGet, path, r.anaPAT, nil, "X-Undocumented", "1")
		var schema map[string]any
		if a.status != http.StatusOK || a.header.Get("Content-Type") != restapi.MediaSchema || json.Unmarshal(a.body, &schema) != nil ||
			schema["title"] != "meeting.request/v1" || a.header.Get("ETag") == "" {
			t.Errorf("GET %s: %s %v", path, a, a.header)
		}
	}
	if a := r.do(t, http.MethodGet, restapi.PathTypes+"/nope%2Fv1", r.anaPAT, nil); a.status != http.StatusNotFound || a.code() != restapi.CodeUnknownMessageType {
		t.Errorf("an unknown type: %s", a)
	}
	// partner.example registers a type of its own: cy sees it, ana does not.
	schema := []byte(`{"$schema":"https://json-schema.org/draft/2020-12/schema","title":"partner.example/offer/v1","type":"object",` +
		`"properties":{"price":{"type":"integer","x-alp-class":"confidential"}},"required":["price"],"additionalProperties":false}`)
	r.registerType(t, partner, "partner.example/offer/v1", schema)
	if a := r.do(t, http.MethodGet, restapi.PathTypes+"/partner.example%2Foffer%2Fv1", r.cy.Token, nil); a.status != http.StatusOK {
		t.Errorf("cy reads partner's type: %s", a)
	}
	if a := r.do(t, http.MethodGet, restapi.PathTypes+"/partner.example%2Foffer%2Fv1", r.anaPAT, nil); a.status != http.StatusNotFound || a.code() != restapi.CodeUnknownMessageType {
		t.Errorf("ana reads partner's type: %s", a)
	}
	if names := r.typeNames(t, r.cy.Token, "100"); !slices.Contains(names, "partner.example/offer/v1") {
		t.Errorf("cy's list misses partner's type: %v", names)
	}
	if names := r.typeNames(t, r.anaPAT, "100"); slices.Contains(names, "partner.example/offer/v1") {
		t.Errorf("ana's list shows partner's type: %v", names)
	}
}

// A connection request goes through the door as connection.request/v1;
// the requester's and the other person's lists show it from their sides,
// from policy over gRPC.
func TestConnections(t *testing.T) {
	r := newRig(t, restapi.Config{})
	if a := r.do(t, http.MethodGet, restapi.PathConnections, r.anaPAT, nil); a.status != http.StatusOK || string(a.body) != "{\"items\":[]}\n" {
		t.Fatalf("no connections yet: %s", a)
	}
	bad := map[string]any{"to": "cy@partner.example", "purpose": "bribery"}
	if a := r.do(t, http.MethodPost, restapi.PathConnections, r.anaPAT, bad); a.status != http.StatusUnprocessableEntity || a.code() != restapi.CodeInvalidBody || a.json(t)["pointer"] != "/purpose" {
		t.Errorf("a purpose the type does not know: %s", a)
	}
	req := map[string]any{"to": "bo@example.org", "purpose": "introduction", "message": "we met at the summit"}
	a := r.do(t, http.MethodPost, restapi.PathConnections, r.anaPAT, req, "Idempotency-Key", "connect-bo")
	if a.status >= 300 || a.json(t)["type"] != "connection.request/v1" || a.json(t)["outcome"] != "hold" {
		t.Fatalf("request: %s", a)
	}
	var ana connectionList
	r.eventually(t, func() bool {
		ana = r.connections(t, r.anaPAT)
		return len(ana.Items) == 1
	}, "ana's connection request is listed")
	if c := ana.Items[0]; c.With != "bo@example.org" || c.State != "requested" || c.Direction != "outgoing" {
		t.Errorf("ana's side: %+v", c)
	}
	if bo := r.connections(t, r.bo.Token); len(bo.Items) != 1 || bo.Items[0].With != "ana@example.org" ||
		bo.Items[0].Direction != "incoming" || bo.Items[0].ID != ana.Items[0].ID {
		t.Errorf("bo's side: %+v", bo)
	}
	if l := r.connections(t, r.cy.Token); len(l.Items) != 0 {
		t.Errorf("cy sees others' connections: %+v", l)
	}
	// Across organizations the request is held on the recipient's side.
	req["to"] = "cy@partner.example"
	if a := r.do(t, http.MethodPost, restapi.PathConnections, r.anaPAT, req); a.json(t)["outcome"] != "hold" {
		t.Fatalf("request to cy: %s", a)
	}
	r.eventually(t, func() bool {
		l := r.connections(t, r.cy.Token)
		return len(l.Items) == 1 && l.Items[0].With == "ana@example.org" && l.Items[0].Direction == "incoming"
	}, "cy sees ana's request")
	// Pages of one.
	bo2 := r.pat(t, r.bo, "alp.read")
	if a := r.do(t, http.MethodPost, restapi.PathConnections, r.cy.Token, map[string]any{"to": "bo@example.org", "purpose": "sales"}); a.json(t)["outcome"] != "hold" {
		t.Fatalf("cy to bo: %s", a)
	}
	var ids []string
	r.eventually(t, func() bool {
		ids = nil
		after := ""
		for range 5 {
			q := "?limit=1"
			if after != "" {
				q += "&after=" + after
			}
			l := r.connectionsAt(t, bo2, q)
			for _, c := range l.Items {
				ids = append(ids, c.ID)
			}
			if after = l.Next; after == "" {
				break
			}
		}
		return len(ids) == 2
	}, "bo's two requests, one per page")
	if ids[0] == ids[1] {
		t.Errorf("the same connection twice: %v", ids)
	}
}

type connectionList struct {
	Items []struct {
		ID, With, State, Direction string
	}
	Next string
}

func (r *rig) connections(t *testing.T, token string) connectionList {
	t.Helper()
	return r.connectionsAt(t, token, "")
}

func (r *rig) connectionsAt(t *testing.T, token, query string) connectionList {
	t.Helper()
	a := r.do(t, http.MethodGet, restapi.PathConnections+query, token, nil)
	var l connectionList
	if a.status != http.StatusOK || json.Unmarshal(a.body, &l) != nil {
		t.Fatalf("connections: %s", a)
	}
	return l
}

// The person's rules are policy's /v1/rules, part of the agent API in the
// document: an agent reads them with alp.read.
func TestRulesReadByAgents(t *testing.T) {
	r := newRig(t, restapi.Config{})
	a := r.do(t, http.MethodGet, "/v1/rules", r.anaPAT, nil)
	var sets struct{ Sets []struct{ Party string } }
	if a.status != http.StatusOK || json.Unmarshal(a.body, &sets) != nil || len(sets.Sets) != 2 {
		t.Errorf("GET /v1/rules: %s", a)
	}
	if a := r.do(t, http.MethodGet, "/v1/rules/recipient", r.anaPAT, nil); a.status != http.StatusOK || a.json(t)["party"] != "recipient" {
		t.Errorf("GET /v1/rules/recipient: %s", a)
	}
	if a := r.do(t, http.MethodGet, "/v1/rules/sender_org", r.anaPAT, nil); a.status != http.StatusNotFound || a.code() != "unknown_set" {
		t.Errorf("an organization's set: %s", a)
	}
	if a := r.do(t, http.MethodGet, "/v1/rules", r.pat(t, r.ana, "alp.send"), nil); a.status != http.StatusForbidden || a.code() != restapi.CodeInsufficientScope {
		t.Errorf("a send-only PAT: %s", a)
	}
}

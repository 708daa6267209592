package pages_test

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/net/html"

	"github.com/alpd-project/alpd/internal/bus"
	"github.com/alpd-project/alpd/internal/httproute"
	"github.com/alpd-project/alpd/internal/natstest"
	"github.com/alpd-project/alpd/internal/streams"
	"github.com/alpd-project/alpd/internal/webui"
	"github.com/alpd-project/alpd/internal/webui/webuitest"
	"github.com/alpd-project/alpd/services/policy/pages"
	"github.com/alpd-project/alpd/services/policy/relationships"
	"github.com/alpd-project/alpd/services/policy/rules"
	"github.com/alpd-project/alpd/services/policy/rulestore"
)

const tenant = webuitest.Tenant

type fixture struct {
	r    *webuitest.Rig
	rels *relationships.Store
	sets *rulestore.Store
}

// setup opens policy's real stores on a real JetStream server, as the
// policy service does, and serves the pages over them.
func setup(t *testing.T) fixture {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	b, err := bus.New(natstest.Connect(t, natstest.RunJetStream(t)), bus.Options{Namespace: "t", Registerer: prometheus.NewRegistry()})
	if err != nil {
		t.Fatal(err)
	}
	def, _ := streams.ByName(streams.Policy)
	if _, err := b.EnsureStream(ctx, def.Spec([]string{tenant}, streams.Limits{})); err != nil {
		t.Fatal(err)
	}
	rels, err := relationships.Open(ctx, b, []string{tenant}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(rels.Close)
	engine, err := rules.New(rules.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	sets, err := rulestore.Open(ctx, b, []string{tenant}, engine, 16, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(sets.Close)
	r := webuitest.New(t, func(r *webuitest.Rig) []httproute.Route {
		return pages.New(pages.Options{Relationships: rels, Rules: sets, UI: r.UI}).Routes()
	})
	return fixture{r: r, rels: rels, sets: sets}
}

func (f fixture) ask(t *testing.T, from string) relationships.Connection {
	t.Helper()
	c, err := f.rels.Request(t.Context(), tenant, relationships.Party{Address: from}, webuitest.Alice.PersonID, "env-"+from)
	if err != nil {
		t.Fatalf("request from %s: %v", from, err)
	}
	return c
}

func wantError(t *testing.T, a webuitest.Answer, status int, code string) {
	t.Helper()
	if a.Status != status || !strings.Contains(a.Body, "<code>"+code+"</code>") {
		t.Fatalf("want %d %s, got %d: %s", status, code, a.Status, a.Body)
	}
	webuitest.CheckPage(t, a.Body)
}

// post submits the form around the button with id on page.
func (f fixture) post(t *testing.T, c *http.Client, doc *html.Node, id string) webuitest.Answer {
	t.Helper()
	b := webuitest.ByID(doc, id)
	if b == nil {
		t.Fatalf("no #%s", id)
	}
	form := webuitest.FormOf(b)
	v := url.Values{}
	for k, x := range webuitest.FormValues(form) {
		v.Set(k, x)
	}
	return f.r.Post(c, webuitest.Attr(form, "action"), v)
}

func TestConnections(t *testing.T) {
	f := setup(t)
	carol := f.ask(t, "carol@partner.example")
	dave := f.ask(t, "dave@partner.example")
	erin := f.ask(t, "erin@spam.example")
	alice, csrf := f.r.SignInAs(webuitest.Alice)

	a := f.r.Get(alice, pages.PathConnections)
	doc := webuitest.CheckPage(t, a.Body)
	if a.Status != http.StatusOK || !strings.Contains(a.Body, "carol@partner.example") || a.Header.Get("Content-Security-Policy") != webui.CSP {
		t.Fatalf("connections: %d %s", a.Status, a.Body)
	}
	if a := f.post(t, alice, doc, "accept-"+carol.ID); a.Status != http.StatusSeeOther || a.Location != pages.PathConnections+"?done=accept" {
		t.Fatalf("accept: %d %q %s", a.Status, a.Location, a.Body)
	}
	if a := f.post(t, alice, doc, "decline-"+dave.ID); a.Status != http.StatusSeeOther {
		t.Fatalf("decline: %d %s", a.Status, a.Body)
	}
	if a := f.post(t, alice, doc, "block-"+erin.ID); a.Status != http.StatusSeeOther {
		t.Fatalf("block: %d %s", a.Status, a.Body)
	}
	for id, want := range map[string]relationships.ConnState{carol.ID: relationships.ConnAccepted, dave.ID: relationships.ConnDeclined} {
		if c, err := f.rels.Connection(tenant, id); err != nil || c.State != want {
			t.Fatalf("connection %s: %v %v, want %s", id, c.State, err, want)
		}
	}
	if blocked, _ := f.rels.BlockedBy(tenant, webuitest.Alice.PersonID, relationships.Party{Address: "erin@spam.example"}); !blocked {
		t.Fatal("erin not blocked")
	}
	a = f.r.Get(alice, pages.PathConnections+"?done=block")
	doc = webuitest.CheckPage(t, a.Body)
	if !strings.Contains(a.Body, "Blocked; nothing from them reaches you.") || webuitest.ByID(doc, "accept-"+carol.ID) != nil {
		t.Fatalf("after answers: %s", a.Body)
	}
	// Accepting a declined request: 409, nothing changes.
	wantError(t, f.r.Post(alice, pages.PathConnections+"/"+dave.ID+"/accept", url.Values{"csrf": {csrf}}), http.StatusConflict, pages.CodeState)

	// Bob cannot answer Alice's requests: 404.
	other := f.ask(t, "frank@partner.example")
	bob, bobCSRF := f.r.SignInAs(webuitest.Bob)
	wantError(t, f.r.Post(bob, pages.PathConnections+"/"+other.ID+"/accept", url.Values{"csrf": {bobCSRF}}), http.StatusNotFound, webui.CodeNotFound)
	if strings.Contains(f.r.Get(bob, pages.PathConnections).Body, "frank@partner.example") {
		t.Fatal("Bob sees Alice's requests")
	}
	// Refusals: CSRF, origin, agent's token, no session.
	wantError(t, f.r.Post(alice, pages.PathConnections+"/"+other.ID+"/accept", nil), http.StatusForbidden, "csrf_token_invalid")
	wantError(t, f.r.Post(alice, pages.PathConnections+"/"+other.ID+"/accept", url.Values{"csrf": {csrf}}, "Origin", "https://evil.example"), http.StatusForbidden, "csrf_origin_mismatch")
	wantError(t, f.r.Post(alice, pages.PathConnections+"/"+other.ID+"/accept", url.Values{"csrf": {csrf}}, "Authorization", "Bearer alp_at_x"), http.StatusForbidden, webui.CodeAgentCredentials)
	anon := f.r.Browser()
	if a := f.r.Get(anon, pages.PathConnections); a.Status != http.StatusFound {
		t.Fatalf("no session: %d", a.Status)
	}
	wantError(t, f.r.Post(anon, pages.PathConnections+"/"+other.ID+"/accept", url.Values{"csrf": {csrf}}), http.StatusUnauthorized, "signin_required")
	if c, _ := f.rels.Connection(tenant, other.ID); c.State != relationships.ConnRequested {
		t.Fatalf("a refused answer changed the connection: %s", c.State)
	}
}

func TestRules(t *testing.T) {
	f := setup(t)
	alice, _ := f.r.SignInAs(webuitest.Alice)
	a := f.r.Get(alice, pages.PathRules)
	doc := webuitest.CheckPage(t, a.Body)
	tmpl, _ := rules.Template(rules.PartyRecipient)
	if n := webuitest.ByID(doc, "text-recipient"); a.Status != http.StatusOK || n == nil || webuitest.Text(n) != strings.Join(strings.Fields(string(tmpl)), " ") {
		t.Fatalf("recipient rules: %d %s", a.Status, a.Body)
	}
	if !strings.Contains(a.Body, `href="/v1/rules/recipient"`) || !strings.Contains(a.Body, "default rules") {
		t.Fatal("no link to the JSON set, or the template is not said")
	}
	// A stored version shows as such.
	mine := append(append([]byte(nil), tmpl...), "\n// Alice's own copy.\n"...)
	v, err := f.sets.Put(t.Context(), tenant, rules.PartyRecipient, webuitest.Alice.PersonID, mine,
		rulestore.Author{Writer: rulestore.ByPerson, ID: webuitest.Alice.PersonID}, 0)
	if err != nil {
		t.Fatal(err)
	}
	if a := f.r.Get(alice, pages.PathRules); v == 0 || !strings.Contains(a.Body, fmt.Sprintf("Version %d", v)) || !strings.Contains(a.Body, "Alice&#39;s own copy.") {
		t.Fatalf("stored version: %s", a.Body)
	}
}

func TestAdmin(t *testing.T) {
	f := setup(t)
	bob, bobCSRF := f.r.SignInAs(webuitest.Bob)
	wantError(t, f.r.Get(bob, pages.PathAdminRels), http.StatusForbidden, webui.CodeAdminRoleRequired)
	wantError(t, f.r.Post(bob, pages.PathAdminRels, url.Values{"csrf": {bobCSRF}, "kind": {"same_org"}}), http.StatusForbidden, webui.CodeAdminRoleRequired)

	alice, csrf := f.r.SignInAs(webuitest.Alice)
	a := f.r.Get(alice, pages.PathAdminRels)
	webuitest.CheckPage(t, a.Body)
	if a.Status != http.StatusOK || !strings.Contains(a.Body, "None: everyone") {
		t.Fatalf("admin page: %d %s", a.Status, a.Body)
	}
	if a := f.r.Post(alice, pages.PathAdminRels, url.Values{"csrf": {csrf}, "kind": {"same_org"}, "commits": {"meeting, meeting"}}); a.Status != http.StatusSeeOther {
		t.Fatalf("add same_org: %d %s", a.Status, a.Body)
	}
	// A commit word that is no word: 422, nothing added.
	wantError(t, f.r.Post(alice, pages.PathAdminRels, url.Values{"csrf": {csrf}, "kind": {"role_may_receive_from"}, "role": {"sales"},
		"domain": {"partner.example"}, "commits": {"Meeting!"}}), http.StatusUnprocessableEntity, pages.CodeInvalid)
	if a := f.r.Post(alice, pages.PathAdminRels, url.Values{"csrf": {csrf}, "kind": {"role_may_receive_from"}, "role": {"sales"}, "domain": {"Partner.Example"}}); a.Status != http.StatusSeeOther {
		t.Fatalf("add role: %d %s", a.Status, a.Body)
	}
	// Bad input: 422, nothing added.
	wantError(t, f.r.Post(alice, pages.PathAdminRels, url.Values{"csrf": {csrf}, "kind": {"role_may_receive_from"}, "role": {"sales"}, "domain": {"not a domain"}}),
		http.StatusUnprocessableEntity, pages.CodeInvalid)
	wantError(t, f.r.Post(alice, pages.PathAdminRels, url.Values{"csrf": {csrf}, "kind": {"everyone"}}), http.StatusUnprocessableEntity, pages.CodeInvalid)
	list, _ := f.rels.OrgRules(tenant)
	if len(list) != 2 {
		t.Fatalf("org rules %v", list)
	}
	a = f.r.Get(alice, pages.PathAdminRels+"?done=added")
	doc := webuitest.CheckPage(t, a.Body)
	if !strings.Contains(a.Body, `People with the role &#34;sales&#34; may receive from anyone at partner.example.`) ||
		!strings.Contains(a.Body, "Also pre-approved, without asking: commitments to meeting.") {
		t.Fatalf("rules not listed: %s", a.Body)
	}
	sameID := relationships.OrgRuleID(tenant, relationships.OrgRule{Kind: relationships.SameOrg})
	if a := f.post(t, alice, doc, "lift-"+sameID); a.Status != http.StatusSeeOther || a.Location != pages.PathAdminRels+"?done=lifted" {
		t.Fatalf("lift: %d %s", a.Status, a.Body)
	}
	if list, _ := f.rels.OrgRules(tenant); len(list) != 1 || list[0].Kind != relationships.RoleMayReceiveFrom {
		t.Fatalf("after lift %v", list)
	}
	wantError(t, f.r.Post(alice, pages.PathAdminRels+"/"+sameID+"/lift", url.Values{"csrf": {csrf}}), http.StatusNotFound, webui.CodeNotFound)
	wantError(t, f.r.Post(alice, pages.PathAdminRels, url.Values{"kind": {"same_org"}}), http.StatusForbidden, "csrf_token_invalid")
}

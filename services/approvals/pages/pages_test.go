package pages_test

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/net/html"

	"github.com/alpd-project/alpd/internal/httproute"
	"github.com/alpd-project/alpd/internal/webui"
	"github.com/alpd-project/alpd/internal/webui/webuitest"
	"github.com/alpd-project/alpd/services/approvals/items"
	"github.com/alpd-project/alpd/services/approvals/pages"
)

// memStore is items.Store in memory, with the contract's refusals.
type memStore struct {
	mu       sync.Mutex
	items    map[string]items.Item // by id
	rendered map[string]items.Rendered
	rules    map[string]items.StandingRule
	decided  []items.Actor
	// fail makes every call fail with it.
	fail error
}

func newStore() *memStore {
	return &memStore{items: map[string]items.Item{}, rendered: map[string]items.Rendered{}, rules: map[string]items.StandingRule{}}
}

func (m *memStore) add(it items.Item, rd items.Rendered) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.items[it.ID], m.rendered[it.ID] = it, rd
}

func (m *memStore) mine(tenant, person, id string) (items.Item, bool) {
	it, ok := m.items[id]
	return it, ok && it.Tenant == tenant && it.PersonID == person
}

func (m *memStore) List(_ context.Context, tenant, person string) ([]items.Item, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.fail != nil {
		return nil, m.fail
	}
	var out []items.Item
	for _, it := range m.items {
		if it.Tenant == tenant && it.PersonID == person {
			out = append(out, it)
		}
	}
	slices.SortFunc(out, func(a, b items.Item) int {
		if (a.State == items.Pending) != (b.State == items.Pending) {
			if a.State == items.Pending {
				return -1
			}
			return 1
		}
		return b.Created.Compare(a.Created)
	})
	return out, nil
}

func (m *memStore) Get(_ context.Context, tenant, person, id string) (items.Item, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.fail != nil {
		return items.Item{}, m.fail
	}
	it, ok := m.mine(tenant, person, id)
	if !ok {
		return items.Item{}, items.ErrNotFound
	}
	return it, nil
}

func (m *memStore) Render(_ context.Context, it items.Item) (items.Rendered, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	rd, ok := m.rendered[it.ID]
	if !ok || rd.Summary == "" {
		return items.Rendered{}, errors.New("the data key is gone")
	}
	return rd, nil
}

func (m *memStore) Decide(_ context.Context, tenant, person, id string, d items.Decision, digest string, by items.Actor) (items.Item, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	it, ok := m.mine(tenant, person, id)
	switch {
	case !ok:
		return items.Item{}, items.ErrNotFound
	case d != items.ApproveOnce && d != items.ApproveAlways && d != items.Deny:
		return items.Item{}, items.ErrInvalid
	case it.State.Terminal():
		return it, items.ErrDecided
	case digest != it.PayloadDigest:
		return items.Item{}, items.ErrDigest
	case !slices.Contains(it.Offers(), d):
		return items.Item{}, items.ErrNotOffered
	}
	it.State = map[items.Decision]items.State{items.ApproveOnce: items.ApprovedOnce, items.ApproveAlways: items.ApprovedAlways, items.Deny: items.Denied}[d]
	it.Decided = time.Now()
	if d == items.ApproveAlways {
		it.StandingRuleID = "rule-" + id
		m.rules[it.StandingRuleID] = items.StandingRule{ID: it.StandingRuleID, Type: it.Type, Counterparty: it.From, Action: it.Commits,
			Created: time.Now(), Expires: time.Now().Add(90 * 24 * time.Hour), FromItem: id}
	}
	m.items[id] = it
	m.decided = append(m.decided, by)
	return it, nil
}

func (m *memStore) Rules(_ context.Context, tenant, person string) ([]items.StandingRule, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []items.StandingRule
	for _, r := range m.rules {
		if it, ok := m.mine(tenant, person, r.FromItem); ok && it.ID != "" {
			out = append(out, r)
		}
	}
	now := time.Now()
	slices.SortFunc(out, func(a, b items.StandingRule) int {
		if a.Active(now) != b.Active(now) {
			if a.Active(now) {
				return -1
			}
			return 1
		}
		return strings.Compare(a.ID, b.ID)
	})
	return out, nil
}

func (m *memStore) RevokeRule(_ context.Context, tenant, person, id string, _ items.Actor) (items.StandingRule, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	r, ok := m.rules[id]
	if !ok {
		return items.StandingRule{}, items.ErrNotFound
	}
	if _, mine := m.mine(tenant, person, r.FromItem); !mine {
		return items.StandingRule{}, items.ErrNotFound
	}
	r.Revoked = true
	m.rules[id] = r
	return r, nil
}

func (m *memStore) item(id string) items.Item {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.items[id]
}

const tenant = webuitest.Tenant

// commitment is a pending meeting acceptance from an attested agent.
func commitment(id, person string) items.Item {
	return items.Item{ID: id, Tenant: tenant, PersonID: person, Kind: items.Commitment, State: items.Pending,
		EnvelopeID: "env-" + id, From: "carol@partner.example", AgentName: "Carol's scheduler", AgentClass: "company", Attested: true,
		Verification: "signed by partner.example's broker, DKIM-equivalent key verified", OriginBroker: "broker.partner.example",
		Type: "meeting.accept/v1", Commits: "meeting", Disclosed: []items.Field{{Pointer: "/attendees", Class: "personal"}},
		Reasons:       []items.Reason{{Party: "recipient", Rule: "commitments-need-approval", Message: "a commitment needs your approval"}},
		PayloadDigest: "sha256-" + id, BindingCode: "K7Q-42M", Created: time.Now().Add(-time.Minute), Expires: time.Now().Add(24 * time.Hour)}
}

func rendered(summary string) items.Rendered {
	return items.Rendered{Summary: summary, Details: []items.Detail{
		{Pointer: "/start", Label: "Starts", Value: "Tue 3 March 2026, 10:00", Class: "business"},
		{Pointer: "/attendees", Label: "Attendees", Value: "Carol <script>alert(1)</script>", Class: "personal"}}}
}

type fixture struct {
	r     *webuitest.Rig
	store *memStore
}

func setup(t *testing.T) fixture {
	t.Helper()
	st := newStore()
	r := webuitest.New(t, func(r *webuitest.Rig) []httproute.Route {
		return pages.New(pages.Options{Store: st, UI: r.UI}).Routes()
	})
	alice := webuitest.Alice.PersonID
	st.add(commitment("it1", alice), rendered("Carol accepts the meeting on Tuesday at 10:00"))
	conf := commitment("it2", alice)
	conf.Kind, conf.Commits, conf.Attested, conf.Created = items.ConfidentialFields, "", false, time.Now().Add(-2*time.Minute)
	st.add(conf, rendered("Carol shares her phone number"))
	done := commitment("it3", alice)
	done.State, done.Decided = items.Denied, time.Now().Add(-time.Hour)
	st.add(done, rendered("An older meeting"))
	st.add(commitment("bobs", webuitest.Bob.PersonID), rendered("Bob's secret meeting"))
	return fixture{r: r, store: st}
}

func wantError(t *testing.T, a webuitest.Answer, status int, code string) {
	t.Helper()
	if a.Status != status || !strings.Contains(a.Body, "<code>"+code+"</code>") {
		t.Fatalf("want %d %s, got %d: %s", status, code, a.Status, a.Body)
	}
	webuitest.CheckPage(t, a.Body)
}

func TestListAndItem(t *testing.T) {
	f := setup(t)
	alice, _ := f.r.SignInAs(webuitest.Alice)
	a := f.r.Get(alice, "/approvals/")
	if a.Status != http.StatusOK || a.Header.Get("Content-Security-Policy") != webui.CSP {
		t.Fatalf("list: %d %s", a.Status, a.Body)
	}
	doc := webuitest.CheckPage(t, a.Body)
	rows := webuitest.FindAll(doc, func(n *html.Node) bool { return webuitest.Attr(n, "data-item-id") != "" })
	var ids []string
	for _, n := range rows {
		ids = append(ids, webuitest.Attr(n, "data-item-id")+":"+webuitest.Attr(n, "data-state"))
	}
	if want := []string{"it1:pending", "it2:pending", "it3:denied"}; !slices.Equal(ids, want) {
		t.Fatalf("rows %v, want %v (pending first, never Bob's)", ids, want)
	}
	for _, want := range []string{"Carol accepts the meeting on Tuesday at 10:00", "carol@partner.example", "K7Q-42M", "Commitment", "Confidential fields"} {
		if !strings.Contains(a.Body, want) {
			t.Errorf("list lacks %q", want)
		}
	}

	a = f.r.Get(alice, "/approvals/items/it1")
	doc = webuitest.CheckPage(t, a.Body)
	if a.Status != http.StatusOK {
		t.Fatalf("item: %d", a.Status)
	}
	for _, want := range []string{"Carol&#39;s scheduler", "company", "attested", "signed by partner.example", "broker.partner.example",
		"Starts", "Tue 3 March 2026, 10:00", "business", "/attendees", "personal", "recipient", "commitments-need-approval", "meeting.accept/v1"} {
		if !strings.Contains(a.Body, want) {
			t.Errorf("item page lacks %q", want)
		}
	}
	if strings.Contains(a.Body, "<script>") {
		t.Fatal("a detail's value is not escaped")
	}
	if n := webuitest.ByID(doc, "binding-code"); n == nil || webuitest.Text(n) != "K7Q-42M" {
		t.Fatal("binding code not shown prominently")
	}
	for _, id := range []string{"approve-once", "approve-always", "deny"} {
		b := webuitest.ByID(doc, id)
		if b == nil {
			t.Fatalf("no #%s", id)
		}
		// A link, not a GET form: the fresh sign-in it may lead to is on
		// the IdP's origin, which CSP's form-action 'self' forbids.
		if b.Data != "a" || !strings.HasPrefix(webuitest.Attr(b, "href"), "/approvals/items/it1/decide?decision=") {
			t.Fatalf("#%s is %s %v", id, b.Data, b.Attr)
		}
	}
	// Confidential fields, self-attested: no approve always.
	doc = webuitest.CheckPage(t, f.r.Get(alice, "/approvals/items/it2").Body)
	if webuitest.ByID(doc, "approve-always") != nil || webuitest.ByID(doc, "approve-once") == nil {
		t.Fatal("confidential fields offer approve always, or not approve once")
	}
	if !strings.Contains(f.r.Get(alice, "/approvals/items/it2").Body, "self-attested") {
		t.Error("self-attested not said")
	}
	// Decided: the final state, no buttons.
	doc = webuitest.CheckPage(t, f.r.Get(alice, "/approvals/items/it3").Body)
	if webuitest.ByID(doc, "deny") != nil || webuitest.Text(webuitest.ByID(doc, "state")) != "denied" {
		t.Fatal("decided item offers decisions or hides its state")
	}
	// Someone else's item does not exist for Alice.
	wantError(t, f.r.Get(alice, "/approvals/items/bobs"), http.StatusNotFound, webui.CodeNotFound)
	wantError(t, f.r.Get(alice, "/approvals/items/nope"), http.StatusNotFound, webui.CodeNotFound)
	wantError(t, f.r.Get(alice, "/approvals/nothing/here"), http.StatusNotFound, webui.CodeNotFound)

	// Content that cannot be opened still shows the item, saying so.
	noContent := commitment("it4", webuitest.Alice.PersonID)
	f.store.add(noContent, items.Rendered{})
	a = f.r.Get(alice, "/approvals/items/it4")
	if a.Status != http.StatusOK || !strings.Contains(a.Body, "cannot be shown right now") {
		t.Fatalf("unrenderable item: %d %s", a.Status, a.Body)
	}
	// A store that fails: 503 page, nothing leaked.
	f.store.mu.Lock()
	f.store.fail = errors.New("nats: connection closed (secret detail)")
	f.store.mu.Unlock()
	a = f.r.Get(alice, "/approvals/")
	wantError(t, a, http.StatusServiceUnavailable, pages.CodeUnavailable)
	if strings.Contains(a.Body, "secret detail") || a.Header.Get("Retry-After") != "1" {
		t.Fatalf("store failure page: %s", a.Body)
	}
}

// confirm opens the confirmation of decision on item id and answers its
// form's values.
func (f fixture) confirm(t *testing.T, c *http.Client, id, decision string) map[string]string {
	t.Helper()
	a := f.r.Get(c, "/approvals/items/"+id+"/decide?decision="+decision)
	if a.Status != http.StatusOK {
		t.Fatalf("confirm %s %s: %d %s", id, decision, a.Status, a.Body)
	}
	doc := webuitest.CheckPage(t, a.Body)
	b := webuitest.ByID(doc, "confirm")
	if b == nil || webuitest.Text(webuitest.ByID(doc, "binding-code")) != "K7Q-42M" {
		t.Fatalf("confirmation without #confirm or binding code: %s", a.Body)
	}
	form := webuitest.FormOf(b)
	if webuitest.Attr(form, "method") != "post" || webuitest.Attr(form, "action") != "/approvals/items/"+id+"/decide" {
		t.Fatalf("confirm form %v", form.Attr)
	}
	return webuitest.FormValues(form)
}

func values(m map[string]string) url.Values {
	v := url.Values{}
	for k, x := range m {
		v.Set(k, x)
	}
	return v
}

func TestDecide(t *testing.T) {
	f := setup(t)
	alice, csrf := f.r.SignInAs(webuitest.Alice)
	form := f.confirm(t, alice, "it1", "approve_always")
	if form["decision"] != "approve_always" || form["payload_digest"] != "sha256-it1" || form["csrf"] != csrf {
		t.Fatalf("confirm form values %v", form)
	}
	a := f.r.Post(alice, "/approvals/items/it1/decide", values(form))
	if a.Status != http.StatusSeeOther || a.Location != "/approvals/items/it1?done=decided" {
		t.Fatalf("decide: %d %q %s", a.Status, a.Location, a.Body)
	}
	if it := f.store.item("it1"); it.State != items.ApprovedAlways {
		t.Fatalf("state %s", it.State)
	}
	if by := f.store.decided[0]; by.PersonID != webuitest.Alice.PersonID || by.SessionID == "" {
		t.Fatalf("actor %+v", by)
	}
	page := f.r.Get(alice, a.Location)
	doc := webuitest.CheckPage(t, page.Body)
	if webuitest.Text(webuitest.ByID(doc, "state")) != "approved always" || !strings.Contains(page.Body, "Your decision is recorded.") {
		t.Fatalf("final state page: %s", page.Body)
	}
	// The same form again: the final state, 409, nothing changes.
	a = f.r.Post(alice, "/approvals/items/it1/decide", values(form))
	if a.Status != http.StatusConflict || !strings.Contains(a.Body, "already decided: approved always") {
		t.Fatalf("repeat: %d %s", a.Status, a.Body)
	}
	webuitest.CheckPage(t, a.Body)
	if len(f.store.decided) != 1 {
		t.Fatal("a repeated decision reached the store as a new one")
	}
	// The confirmation of a decided item shows the final state too.
	if a := f.r.Get(alice, "/approvals/items/it1/decide?decision=deny"); a.Status != http.StatusConflict || !strings.Contains(a.Body, "approved always") {
		t.Fatalf("confirm decided: %d", a.Status)
	}

	// The standing rule it made, and its revocation.
	rules := f.r.Get(alice, "/approvals/rules")
	doc = webuitest.CheckPage(t, rules.Body)
	rev := webuitest.ByID(doc, "revoke-rule-it1")
	if rev == nil || !strings.Contains(rules.Body, "carol@partner.example") {
		t.Fatalf("rules page: %s", rules.Body)
	}
	rf := webuitest.FormOf(rev)
	if a := f.r.Post(alice, webuitest.Attr(rf, "action"), nil); a.Status != http.StatusForbidden {
		t.Fatalf("revoke without csrf: %d", a.Status)
	}
	a = f.r.Post(alice, webuitest.Attr(rf, "action"), values(webuitest.FormValues(rf)))
	if a.Status != http.StatusSeeOther || a.Location != "/approvals/rules?done=revoked" {
		t.Fatalf("revoke: %d %q %s", a.Status, a.Location, a.Body)
	}
	doc = webuitest.CheckPage(t, f.r.Get(alice, a.Location).Body)
	if webuitest.ByID(doc, "revoke-rule-it1") != nil {
		t.Fatal("a revoked rule still offers revoke")
	}
	// Bob cannot revoke Alice's rule: 404.
	bob, bobCSRF := f.r.SignInAs(webuitest.Bob)
	wantError(t, f.r.Post(bob, "/approvals/rules/rule-it1/revoke", url.Values{"csrf": {bobCSRF}}), http.StatusNotFound, webui.CodeNotFound)

	// Deny on the confidential item works; approve always is not offered.
	if a := f.r.Get(alice, "/approvals/items/it2/decide?decision=approve_always"); a.Status != http.StatusUnprocessableEntity {
		t.Fatalf("confirm not offered: %d", a.Status)
	}
	wantError(t, f.r.Post(alice, "/approvals/items/it2/decide", url.Values{"csrf": {csrf}, "decision": {"approve_always"}, "payload_digest": {"sha256-it2"}}),
		http.StatusUnprocessableEntity, pages.CodeNotOffered)
	form = f.confirm(t, alice, "it2", "deny")
	if a := f.r.Post(alice, "/approvals/items/it2/decide", values(form)); a.Status != http.StatusSeeOther || f.store.item("it2").State != items.Denied {
		t.Fatalf("deny: %d %s", a.Status, f.store.item("it2").State)
	}
}

func TestDecideRefusals(t *testing.T) {
	f := setup(t)
	alice, csrf := f.r.SignInAs(webuitest.Alice)
	good := url.Values{"csrf": {csrf}, "decision": {"approve_once"}, "payload_digest": {"sha256-it1"}}
	with := func(k, v string) url.Values {
		out := url.Values{}
		for key, x := range good {
			out[key] = x
		}
		out.Set(k, v)
		return out
	}
	// The request changed since the page: 409, shown again, nothing decided.
	a := f.r.Post(alice, "/approvals/items/it1/decide", with("payload_digest", "sha256-older"))
	if a.Status != http.StatusConflict || !strings.Contains(a.Body, "review it again") {
		t.Fatalf("digest: %d %s", a.Status, a.Body)
	}
	doc := webuitest.CheckPage(t, a.Body)
	if webuitest.ByID(doc, "approve-once") == nil {
		t.Fatal("the changed request is not offered for review")
	}
	// Bad form, unknown decision.
	wantError(t, f.r.Post(alice, "/approvals/items/it1/decide", with("decision", "maybe")), http.StatusBadRequest, webui.CodeInvalidRequest)
	wantError(t, f.r.Post(alice, "/approvals/items/it1/decide", with("payload_digest", "")), http.StatusBadRequest, webui.CodeInvalidRequest)
	wantError(t, f.r.Get(alice, "/approvals/items/it1/decide?decision=maybe"), http.StatusBadRequest, webui.CodeInvalidRequest)
	// Someone else's item: 404, on the confirmation and the decision.
	wantError(t, f.r.Get(alice, "/approvals/items/bobs/decide?decision=deny"), http.StatusNotFound, webui.CodeNotFound)
	wantError(t, f.r.Post(alice, "/approvals/items/bobs/decide", with("payload_digest", "sha256-bobs")), http.StatusNotFound, webui.CodeNotFound)
	// CSRF: missing, wrong, foreign origin.
	wantError(t, f.r.Post(alice, "/approvals/items/it1/decide", with("csrf", "")), http.StatusForbidden, "csrf_token_invalid")
	wantError(t, f.r.Post(alice, "/approvals/items/it1/decide", good, "Origin", "https://evil.example"), http.StatusForbidden, "csrf_origin_mismatch")
	// An agent's token: refused, even with Alice's cookie.
	wantError(t, f.r.Post(alice, "/approvals/items/it1/decide", good, "Authorization", "Bearer alp_at_agent"), http.StatusForbidden, webui.CodeAgentCredentials)
	wantError(t, f.r.Get(alice, "/approvals/", "Authorization", "Bearer alp_at_agent"), http.StatusForbidden, webui.CodeAgentCredentials)
	// No session: GET pages send to sign in, POST is 401.
	anon := f.r.Browser()
	for _, p := range []string{"/approvals/", "/approvals/items/it1", "/approvals/items/it1/decide?decision=deny", "/approvals/rules"} {
		if a := f.r.Get(anon, p); a.Status != http.StatusFound || !strings.HasPrefix(a.Location, "/signin?") {
			t.Fatalf("%s without session: %d %q", p, a.Status, a.Location)
		}
	}
	wantError(t, f.r.Post(anon, "/approvals/items/it1/decide", good), http.StatusUnauthorized, "signin_required")
	// Not fresh: the confirmation goes to a fresh sign-in, the POST is 401.
	f.r.Advance(6 * time.Minute)
	a = f.r.Get(alice, "/approvals/items/it1/decide?decision=approve_once")
	loc, _ := url.Parse(a.Location)
	if a.Status != http.StatusFound || loc.Query().Get("fresh") != "1" || loc.Query().Get("return") != "/approvals/items/it1/decide?decision=approve_once" {
		t.Fatalf("stale confirmation: %d %q", a.Status, a.Location)
	}
	a = f.r.Post(alice, "/approvals/items/it1/decide", good)
	wantError(t, a, http.StatusUnauthorized, "fresh_signin_required")
	if !strings.Contains(a.Body, "fresh=1") {
		t.Fatal("the 401 page offers no fresh sign-in")
	}
	wantError(t, f.r.Post(alice, "/approvals/rules/rule-x/revoke", url.Values{"csrf": {csrf}}), http.StatusUnauthorized, "fresh_signin_required")
	// Reading still works with the stale session.
	if a := f.r.Get(alice, "/approvals/items/it1"); a.Status != http.StatusOK {
		t.Fatalf("stale read: %d", a.Status)
	}
	if f.store.item("it1").State != items.Pending || len(f.store.decided) != 0 {
		t.Fatal("a refused decision changed the item")
	}
}

// TestJSONErrors: a client that asks for JSON gets problem details.
func TestJSONErrors(t *testing.T) {
	f := setup(t)
	alice, _ := f.r.SignInAs(webuitest.Alice)
	a := f.r.Get(alice, "/approvals/items/bobs", "Accept", "application/json")
	if a.Status != http.StatusNotFound || a.Header.Get("Content-Type") != "application/problem+json" || !strings.Contains(a.Body, `"code":"not_found"`) {
		t.Fatalf("JSON 404: %d %s %s", a.Status, a.Header.Get("Content-Type"), a.Body)
	}
}

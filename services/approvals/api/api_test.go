package api

import (
	"context"
	"encoding/json"

	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/alpd-project/alpd/internal/httpjson"
	"github.com/alpd-project/alpd/internal/httproute"
	"github.com/alpd-project/alpd/internal/signin"
	"github.com/alpd-project/alpd/services/approvals/items"
)

// memStore is an items.Store in memory: the HTTP layer's tests need its
// answers, not the approvals stream (services/approvals/storage tests that).
type memStore struct {
	items     map[string]items.Item
	decisions int
}

func (m *memStore) List(_ context.Context, _, person string) ([]items.Item, error) {
	var out []items.Item
	for _, it := range m.items {
		if it.PersonID == person {
			out = append(out, it)
		}
	}
	return out, nil
}

func (m *memStore) Get(_ context.Context, _, person, id string) (items.Item, error) {
	it, ok := m.items[id]
	if !ok || it.PersonID != person {
		return items.Item{}, items.ErrNotFound
	}
	return it, nil
}

func (m *memStore) Render(context.Context, items.Item) (items.Rendered, error) {
	return items.Rendered{Summary: "s", Details: []items.Detail{}}, nil
}

func (m *memStore) Decide(ctx context.Context, tenant, person, id string, d items.Decision, digest string, _ items.Actor) (items.Item, error) {
	it, err := m.Get(ctx, tenant, person, id)
	if err != nil {
		return it, err
	}
	if it.State.Terminal() {
		return it, items.ErrDecided
	}
	if digest != it.PayloadDigest {
		return it, items.ErrDigest
	}
	m.decisions++
	it.State = map[items.Decision]items.State{items.ApproveOnce: items.ApprovedOnce, items.Deny: items.Denied}[d]
	m.items[id] = it
	return it, nil
}

func (m *memStore) Rules(context.Context, string, string) ([]items.StandingRule, error) {
	return nil, nil
}
func (m *memStore) RevokeRule(context.Context, string, string, string, items.Actor) (items.StandingRule, error) {
	return items.StandingRule{}, items.ErrNotFound
}

// fakeSessions: the cookie "s" names the person; the CSRF token is "good"
// from this origin; "stale" signed in an hour ago.
type fakeSessions struct{ now time.Time }

func (f fakeSessions) Session(r *http.Request) (*signin.Session, error) {
	c, err := r.Cookie("s")
	if err != nil {
		return nil, httpjson.Errorf(http.StatusUnauthorized, "no_session", "sign in")
	}
	at := f.now
	if c.Value == "stale" {
		at = f.now.Add(-time.Hour)
	}
	return &signin.Session{ID: "sess", Tenant: "example.org", PersonID: "p_lee", AuthTime: at}, nil
}

func (f fakeSessions) CheckCSRF(r *http.Request) error {
	if r.Header.Get("Origin") != "https://alpd.example" {
		return httpjson.Errorf(http.StatusForbidden, signin.CodeCSRFOrigin, "cross-origin request refused")
	}
	if r.Header.Get("X-CSRF-Token") != "good" {
		return httpjson.Errorf(http.StatusForbidden, signin.CodeCSRFToken, "missing or wrong CSRF token")
	}
	return nil
}

func serve(t *testing.T, st items.Store) http.Handler {
	t.Helper()
	now := time.Now()
	mux := http.NewServeMux()
	if err := httproute.Mount(mux, New(Options{Store: st, Sessions: fakeSessions{now: now}, Now: func() time.Time { return now }}).Routes()); err != nil {
		t.Fatal(err)
	}
	return mux
}

func pending(id, person string) items.Item {
	return items.Item{ID: id, PersonID: person, Kind: items.Commitment, State: items.Pending, PayloadDigest: "d1", Attested: true}
}

// TestDecisionRefusals: every way a decision is refused answers its status
// and code, and the store sees no decision.
func TestDecisionRefusals(t *testing.T) {
	st := &memStore{items: map[string]items.Item{"h1": pending("h1", "p_lee"), "h2": pending("h2", "p_ana")}}
	h := serve(t, st)
	good := func(r *http.Request) {
		r.AddCookie(&http.Cookie{Name: "s", Value: "fresh"})
		r.Header.Set("Origin", "https://alpd.example")
		r.Header.Set("X-CSRF-Token", "good")
	}
	body := `{"decision":"approve_once","payload_digest":"d1"}`
	cases := []struct {
		name   string
		path   string
		body   string
		tweak  func(*http.Request)
		status int
		code   string
	}{
		{"an agent's token", "h1", body, func(r *http.Request) { good(r); r.Header.Set("Authorization", "Bearer alp_pat_x") }, 403, CodeAgentCredential},
		{"no session", "h1", body, func(r *http.Request) { r.Header.Set("Origin", "https://alpd.example") }, 401, "no_session"},
		{"no CSRF token", "h1", body, func(r *http.Request) { good(r); r.Header.Del("X-CSRF-Token") }, 403, signin.CodeCSRFToken},
		{"stale CSRF token", "h1", body, func(r *http.Request) { good(r); r.Header.Set("X-CSRF-Token", "old") }, 403, signin.CodeCSRFToken},
		{"another origin", "h1", body, func(r *http.Request) { good(r); r.Header.Set("Origin", "https://evil.example") }, 403, signin.CodeCSRFOrigin},
		{"no fresh sign-in", "h1", body, func(r *http.Request) {
			good(r)
			r.Header.Set("Cookie", "s=stale")
		}, 401, CodeFreshSigninRequired},
		{"someone else's item", "h2", body, good, 404, CodeNotFound},
		{"a changed payload", "h1", `{"decision":"approve_once","payload_digest":"d0"}`, good, 409, CodeChanged},
		{"not JSON", "h1", `decision=approve_once`, good, 400, CodeInvalid},
		{"an unknown member", "h1", `{"decision":"approve_once","payload_digest":"d1","also":1}`, good, 400, CodeInvalid},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := httptest.NewRequest(http.MethodPost, PathItems+"/items/"+c.path+"/decision", strings.NewReader(c.body))
			r.Header.Set("Content-Type", "application/json")
			c.tweak(r)
			w := httptest.NewRecorder()
			h.ServeHTTP(w, r)
			var p struct {
				Code string `json:"code"`
			}
			_ = json.Unmarshal(w.Body.Bytes(), &p)
			if w.Code != c.status || p.Code != c.code {
				t.Fatalf("%d %s, want %d %s", w.Code, w.Body, c.status, c.code)
			}
			if st.decisions != 0 {
				t.Fatalf("the store saw %d decisions", st.decisions)
			}
		})
	}
}

// TestDecisionThenRepeat: a decision answers the item decided; the same
// decision again answers 409 with the final state, and the store decided
// once.
func TestDecisionThenRepeat(t *testing.T) {
	st := &memStore{items: map[string]items.Item{"h1": pending("h1", "p_lee")}}
	h := serve(t, st)
	for i, want := range []int{200, 409} {
		r := httptest.NewRequest(http.MethodPost, PathItems+"/items/h1/decision", strings.NewReader(`{"decision":"deny","payload_digest":"d1"}`))
		r.AddCookie(&http.Cookie{Name: "s", Value: "fresh"})
		r.Header.Set("Origin", "https://alpd.example")
		r.Header.Set("X-CSRF-Token", "good")
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		var got itemJSON
		if err := json.Unmarshal(w.Body.Bytes(), &got); err != nil || w.Code != want || got.State != items.Denied || len(got.Offers) != 0 {
			t.Fatalf("decision %d: %d %s", i, w.Code, w.Body)
		}
	}
	if st.decisions != 1 {
		t.Fatalf("%d decisions stored", st.decisions)
	}
	r := httptest.NewRequest(http.MethodGet, PathItems, nil)
	r.AddCookie(&http.Cookie{Name: "s", Value: "fresh"})
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	if w.Code != 200 || !strings.Contains(w.Body.String(), `"state":"denied"`) {
		t.Fatalf("list: %d %s", w.Code, w.Body)
	}

}

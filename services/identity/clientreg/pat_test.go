package clientreg_test

import (
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/alpd-project/alpd/internal/accesstoken"
	"github.com/alpd-project/alpd/internal/agentauth"
	"github.com/alpd-project/alpd/internal/identitystore"
	"github.com/alpd-project/alpd/services/identity/clientreg"
)

func issuePAT(t *testing.T, w *web, u *user, body any) clientreg.IssuedPAT {
	t.Helper()
	a := w.do(u, http.MethodPost, "/v1/pats", body, reqOpt{})
	if a.status != http.StatusCreated {
		t.Fatalf("issue: %d %s", a.status, a.body)
	}
	if a.header.Get("Cache-Control") != "no-store" {
		t.Errorf("Cache-Control %q", a.header.Get("Cache-Control"))
	}
	return decode[clientreg.IssuedPAT](t, a)
}

func listPATs(t *testing.T, w *web, u *user) (clientreg.PATList, string) {
	t.Helper()
	a := w.do(u, http.MethodGet, "/v1/pats", nil, reqOpt{})
	if a.status != http.StatusOK {
		t.Fatalf("list: %d %s", a.status, a.body)
	}
	return decode[clientreg.PATList](t, a), a.body
}

func wantPATErr(t *testing.T, err error, sentinel error, code string) *agentauth.PATError {
	t.Helper()
	var pe *agentauth.PATError
	if !errors.Is(err, sentinel) || !errors.As(err, &pe) || pe.Code != code {
		t.Fatalf("got %v, want %v (%s)", err, sentinel, code)
	}
	return pe
}

func TestPATLifecycle(t *testing.T) {
	e := newRig(t)
	w := newWeb(t, e, nil)
	alice, bob := w.signIn("alice"), w.signIn("bob")
	ctx := ctxT(t)
	v := agentauth.PATVerifier{Store: e.store, Tenants: []string{other, tenant}}

	expiresIn := int64(7 * 24 * 3600)
	p := issuePAT(t, w, alice, clientreg.PATRequest{Name: "CI bot", Scopes: []string{"alp.read", "alp.read"}, ExpiresIn: &expiresIn})
	if !accesstoken.LooksLikePAT(p.Token) || p.Name != "CI bot" || strings.Join(p.Scopes, " ") != "alp.read" || p.Revoked || p.Expired {
		t.Fatalf("issued %+v", p)
	}
	if d := time.Until(p.ExpiresAt) - 7*24*time.Hour; d < -time.Minute || d > time.Minute {
		t.Errorf("expires_at %v", p.ExpiresAt)
	}
	id, hashHex, err := accesstoken.ParsePAT(p.Token)
	if err != nil || id != p.ID {
		t.Fatalf("token id %q, answer id %q: %v", id, p.ID, err)
	}

	// Default lifetime.
	p2 := issuePAT(t, w, alice, map[string]any{"name": "default", "scopes": []string{"alp.send"}})
	if d := time.Until(p2.ExpiresAt) - clientreg.DefaultPATLifetime; d < -time.Minute || d > time.Minute {
		t.Errorf("default expires_at %v", p2.ExpiresAt)
	}

	// Listed without the token or its hash; only the owner's.
	list, raw := listPATs(t, w, alice)
	if len(list.PATs) != 2 || list.PATs[0].ID != p2.ID || list.PATs[1].ID != p.ID {
		t.Fatalf("list %+v", list)
	}
	// "alppat_<26-character id>_<secret>" (the secret may hold '_').
	secret := p.Token[len(accesstoken.PATPrefix)+26+1:]
	if len(secret) != 43 {
		t.Fatalf("secret part %q", secret)
	}
	if strings.Contains(raw, secret) || strings.Contains(raw, hashHex) || strings.Contains(raw, "token\"") {
		t.Errorf("the list shows the token or its hash: %s", raw)
	}
	if l, _ := listPATs(t, w, bob); len(l.PATs) != 0 {
		t.Errorf("bob sees %+v", l)
	}

	// Never on the stream: neither the token nor its secret part.
	if e.streamContains(t, []byte(p.Token)) || e.streamContains(t, []byte(secret)) {
		t.Error("a personal access token is on the identity stream")
	}
	h, _ := identitystore.ParseHash(hashHex)
	if !e.streamContains(t, h[:]) {
		t.Error("the token's hash is not on the stream (is the scan working?)")
	}

	// Verify.
	got, err := v.Verify(ctx, tenant, p.Token, "alp.read")
	if err != nil || got.PersonID != alice.personID || got.ID != p.ID {
		t.Fatalf("verify: %+v %v", got, err)
	}
	if got, err := v.VerifyAny(ctx, p.Token); err != nil || got.Tenant != tenant {
		t.Fatalf("verify any: %+v %v", got, err)
	}
	pe := wantPATErr(t, func() error { _, err := v.Verify(ctx, tenant, p.Token, "alp.read", "alp.send"); return err }(), agentauth.ErrInsufficientScope, "insufficient_scope")
	if !strings.Contains(pe.Description, "alp.send") || strings.Contains(pe.Description, "alp.read") || pe.Scope != "alp.read alp.send" || pe.HTTPStatus() != http.StatusForbidden {
		t.Errorf("insufficient scope error %+v", pe)
	}
	_, err = v.Verify(ctx, other, p.Token)
	wantPATErr(t, err, agentauth.ErrInvalidPAT, "invalid_token")
	tampered := p.Token[:len(p.Token)-2] + flip(p.Token[len(p.Token)-2]) + p.Token[len(p.Token)-1:]
	_, err = v.Verify(ctx, tenant, tampered)
	wantPATErr(t, err, agentauth.ErrInvalidPAT, "invalid_token")
	_, err = v.VerifyAny(ctx, tampered)
	wantPATErr(t, err, agentauth.ErrInvalidPAT, "invalid_token")
	_, err = v.Verify(ctx, tenant, "alppat_garbage")
	pe = wantPATErr(t, err, agentauth.ErrInvalidPAT, "invalid_token")
	if pe.HTTPStatus() != http.StatusUnauthorized {
		t.Errorf("status %d", pe.HTTPStatus())
	}
	_, err = v.VerifyAny(ctx, "nope")
	wantPATErr(t, err, agentauth.ErrInvalidPAT, "invalid_token")
	unknown, _, _ := accesstoken.NewPAT()
	_, err = v.Verify(ctx, tenant, unknown)
	wantPATErr(t, err, agentauth.ErrInvalidPAT, "invalid_token")
	if strings.Contains(err.Error(), unknown[len(accesstoken.PATPrefix):]) {
		t.Error("the error shows the token")
	}

	// Expired.
	later := agentauth.PATVerifier{Store: e.store, Now: func() time.Time { return time.Now().Add(8 * 24 * time.Hour) }}
	_, err = later.Verify(ctx, tenant, p.Token, "alp.read")
	wantPATErr(t, err, agentauth.ErrPATExpired, "invalid_token")

	// Another person cannot revoke it (and learns nothing), nor without CSRF.
	wantErr(t, w.do(bob, http.MethodDelete, "/v1/pats/"+p.ID, nil, reqOpt{}), http.StatusNotFound, clientreg.CodeNotFound)
	wantErr(t, w.do(alice, http.MethodDelete, "/v1/pats/"+p.ID, nil, reqOpt{noCSRF: true}), http.StatusForbidden, "csrf_token_invalid")
	wantErr(t, w.do(anonymous(), http.MethodDelete, "/v1/pats/"+p.ID, nil, reqOpt{}), http.StatusUnauthorized, "signin_required")
	wantErr(t, w.do(alice, http.MethodDelete, "/v1/pats/nope", nil, reqOpt{}), http.StatusNotFound, clientreg.CodeNotFound)
	if _, err := v.Verify(ctx, tenant, p.Token); err != nil {
		t.Fatalf("still valid: %v", err)
	}

	// The owner revokes it.
	a := w.do(alice, http.MethodDelete, "/v1/pats/"+p.ID, nil, reqOpt{})
	if a.status != http.StatusNoContent {
		t.Fatalf("revoke: %d %s", a.status, a.body)
	}
	_, err = v.Verify(ctx, tenant, p.Token, "alp.read")
	wantPATErr(t, err, agentauth.ErrPATRevoked, "invalid_token")
	if a := w.do(alice, http.MethodDelete, "/v1/pats/"+p.ID, nil, reqOpt{}); a.status != http.StatusNoContent {
		t.Fatalf("revoke again: %d %s", a.status, a.body)
	}
	list, _ = listPATs(t, w, alice)
	if len(list.PATs) != 2 || !list.PATs[1].Revoked || list.PATs[1].RevokedReason == "" || list.PATs[0].Revoked {
		t.Errorf("list after revoke %+v", list)
	}

	// Revoking the person's agents voids the rest.
	if _, err := v.Verify(ctx, tenant, p2.Token, "alp.send"); err != nil {
		t.Fatal(err)
	}
	if err := e.store.RevokePersonAgents(ctx, tenant, alice.personID, "left the company"); err != nil {
		t.Fatal(err)
	}
	_, err = v.Verify(ctx, tenant, p2.Token, "alp.send")
	pe = wantPATErr(t, err, agentauth.ErrPATRevoked, "invalid_token")
	if !strings.Contains(pe.Description, "left the company") {
		t.Errorf("reason %q", pe.Description)
	}
}

func flip(c byte) string {
	if c == 'A' {
		return "B"
	}
	return "A"
}

func TestPATRequestRules(t *testing.T) {
	e := newRig(t)
	w := newWeb(t, e, nil)
	bob := w.signIn("bob")
	ok := func(extra map[string]any) map[string]any {
		m := map[string]any{"name": "n", "scopes": []string{"alp.read"}}
		for k, v := range extra {
			m[k] = v
		}
		return m
	}
	cases := []struct {
		name string
		body any
		code string
	}{
		{"no name", ok(map[string]any{"name": ""}), clientreg.CodeInvalidBody},
		{"long name", ok(map[string]any{"name": strings.Repeat("n", 101)}), clientreg.CodeInvalidBody},
		{"control name", ok(map[string]any{"name": "a\x00b"}), clientreg.CodeInvalidBody},
		{"no scopes", ok(map[string]any{"scopes": []string{}}), clientreg.CodeInvalidBody},
		{"scope not allowed", ok(map[string]any{"scopes": []string{"alp.admin"}}), "invalid_scope"},
		{"too long", ok(map[string]any{"expires_in": 91 * 24 * 3600}), clientreg.CodeInvalidBody},
		{"too short", ok(map[string]any{"expires_in": 60}), clientreg.CodeInvalidBody},
		{"negative", ok(map[string]any{"expires_in": -1}), clientreg.CodeInvalidBody},
		{"fraction", ok(map[string]any{"expires_in": 3600.5}), clientreg.CodeInvalidBody},
		{"unknown member", ok(map[string]any{"scope": "alp.read"}), clientreg.CodeInvalidBody},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			wantErr(t, w.do(bob, http.MethodPost, "/v1/pats", tc.body, reqOpt{}), http.StatusBadRequest, tc.code)
		})
	}
	wantErr(t, w.do(bob, http.MethodPost, "/v1/pats", ok(nil), reqOpt{noCSRF: true}), http.StatusForbidden, "csrf_token_invalid")
	wantErr(t, w.do(anonymous(), http.MethodPost, "/v1/pats", ok(nil), reqOpt{}), http.StatusUnauthorized, "signin_required")
	// GET without a session is a 401, not a redirect to sign in.
	wantErr(t, w.do(anonymous(), http.MethodGet, "/v1/pats", nil, reqOpt{}), http.StatusUnauthorized, "signin_required")
	wantErr(t, w.do(bob, http.MethodPut, "/v1/pats", ok(nil), reqOpt{}), http.StatusMethodNotAllowed, clientreg.CodeMethodNotAllowed)
	wantErr(t, w.do(bob, http.MethodGet, "/v1/pats/x", nil, reqOpt{}), http.StatusMethodNotAllowed, clientreg.CodeMethodNotAllowed)

	// At most MaxPATsPerPerson (5) active tokens.
	var first clientreg.IssuedPAT
	for i := range 5 {
		p := issuePAT(t, w, bob, ok(nil))
		if i == 0 {
			first = p
		}
	}
	wantErr(t, w.do(bob, http.MethodPost, "/v1/pats", ok(nil), reqOpt{}), http.StatusConflict, clientreg.CodeTooManyPATs)
	if a := w.do(bob, http.MethodDelete, "/v1/pats/"+first.ID, nil, reqOpt{}); a.status != http.StatusNoContent {
		t.Fatalf("%d %s", a.status, a.body)
	}
	issuePAT(t, w, bob, ok(nil))
}

func TestPATVerifierFailsClosed(t *testing.T) {
	e := newRig(t)
	w := newWeb(t, e, nil)
	alice := w.signIn("alice")
	p := issuePAT(t, w, alice, map[string]any{"name": "n", "scopes": []string{"alp.read"}})
	ctx := ctxT(t)

	s := e.open(t)
	if _, err := (agentauth.PATVerifier{Store: s}).Verify(ctx, tenant, p.Token); err != nil {
		t.Fatalf("second replica: %v", err)
	}
	s.Close()
	_, err := agentauth.PATVerifier{Store: s}.Verify(ctx, tenant, p.Token)
	pe := wantPATErr(t, err, agentauth.ErrPATUnavailable, "temporarily_unavailable")
	if pe.HTTPStatus() != http.StatusServiceUnavailable {
		t.Errorf("status %d", pe.HTTPStatus())
	}
	_, err = agentauth.PATVerifier{Store: s, Tenants: []string{tenant}}.VerifyAny(ctx, p.Token)
	wantPATErr(t, err, agentauth.ErrPATUnavailable, "temporarily_unavailable")
	// Freshness checks can be turned off (the projection is still there).
	if _, err := (agentauth.PATVerifier{Store: s, MaxStaleness: -1}).Verify(ctx, tenant, p.Token); err != nil {
		t.Fatal(err)
	}
	_, err = agentauth.PATVerifier{}.Verify(ctx, tenant, p.Token)
	wantPATErr(t, err, agentauth.ErrPATUnavailable, "temporarily_unavailable")
}

func TestPATListNotConfigured(t *testing.T) {
	e := newRig(t)
	w := newWeb(t, e, func(c *clientreg.Config) { c.Bus = nil })
	bob := w.signIn("bob")
	// Issuing works without a lister (no per-person limit then).
	issuePAT(t, w, bob, map[string]any{"name": "n", "scopes": []string{"alp.read"}})
	wantErr(t, w.do(bob, http.MethodGet, "/v1/pats", nil, reqOpt{}), http.StatusNotImplemented, clientreg.CodeUnavailable)
}

package identity_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/alpd-project/alpd/broker"
	"github.com/alpd-project/alpd/internal/keystore"
	"github.com/alpd-project/alpd/internal/natstest"
	"github.com/alpd-project/alpd/internal/signin"
	"github.com/alpd-project/alpd/internal/testidp"
	"github.com/alpd-project/alpd/internal/testkit"
	"github.com/alpd-project/alpd/services/identity"
)

// TestRecheckWithTheIdP signs a person in through the broker at a test IdP,
// then re-checks them as the authorization server does on every agent
// refresh: fine while the IdP vouches; within the grace period while the
// IdP is down; refused after the grace period; refused at once when the IdP
// disables the person.
func TestRecheckWithTheIdP(t *testing.T) {
	var h atomic.Value
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.Load().(http.Handler).ServeHTTP(w, r)
	}))
	defer srv.Close()
	idp := testkit.StartIdP(t, testidp.Config{
		Users:     []testidp.User{{Subject: "sub-ana", Username: "ana", Password: "pw", Email: "ana@example.org", EmailVerified: true}},
		Clients:   []testidp.Client{{ID: "alpd", Secret: "s3cret", RedirectURIs: []string{srv.URL + "/signin/callback/example.org"}}},
		AutoLogin: true,
	})

	s := natstest.RunJetStream(t)
	b, err := broker.New(broker.Config{Name: "alpd", Tenants: []string{"example.org"}, PublicURL: srv.URL,
		InsecureCookies: true, RecheckGrace: 300 * time.Millisecond,
		IdPs: []signin.TenantIdP{{Tenant: "example.org", Issuer: idp.Issuer(), ClientID: "alpd", ClientSecret: "s3cret",
			EmailDomains: []string{"example.org"}}}},
		broker.Deps{NATS: natstest.Connect(t, s), KeyStore: keystore.NewMemory()})
	if err != nil {
		t.Fatal(err)
	}
	h.Store(b.Handler())
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = b.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()
	<-b.Started()
	if err := b.StartError(); err != nil {
		t.Fatal(err)
	}

	jar, _ := cookiejar.New(nil)
	browser := &http.Client{Jar: jar, Timeout: 10 * time.Second}
	resp, err := browser.Get(srv.URL + "/signin?tenant=example.org&login_hint=ana")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	person, err := b.Identity().Store().PersonBySubject(ctx, "example.org", idp.Issuer(), "sub-ana")
	if err != nil {
		t.Fatalf("no person after sign-in: %v", err)
	}
	rc := b.Identity().Recheck()
	if err := rc.Recheck(ctx, "example.org", person.ID); err != nil {
		t.Fatalf("recheck while vouched: %v", err)
	}
	idp.SetDown(true)
	if err := rc.Recheck(ctx, "example.org", person.ID); err != nil {
		t.Fatalf("recheck within the grace period: %v", err)
	}
	time.Sleep(400 * time.Millisecond)
	if err := rc.Recheck(ctx, "example.org", person.ID); !errors.Is(err, identity.ErrPersonDisabled) {
		t.Fatalf("recheck after the grace period: %v, want ErrPersonDisabled", err)
	}
	idp.SetDown(false)
	if err := rc.Recheck(ctx, "example.org", person.ID); err != nil {
		t.Fatalf("recheck after the IdP is back: %v", err)
	}
	idp.DisableUser("sub-ana")
	if err := rc.Recheck(ctx, "example.org", person.ID); !errors.Is(err, identity.ErrPersonDisabled) {
		t.Fatalf("recheck of a disabled person: %v", err)
	}
	if err := rc.Recheck(ctx, "example.org", "p_nobody"); !errors.Is(err, identity.ErrPersonDisabled) {
		t.Fatalf("recheck of a person without a kept token: %v", err)
	}
}

// TestRecheckWithDex re-checks people at an IdP that behaves like Dex: its
// refreshed ID tokens repeat the sign-in's nonce, and it answers a dead
// refresh token with invalid_request. Re-checks succeed and keep each
// rotated refresh token; a rotated token is kept even when the new ID token
// fails its checks; a dead token means sign in again at once, not after the
// grace period; every failed re-check is logged with why.
func TestRecheckWithDex(t *testing.T) {
	var h atomic.Value
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.Load().(http.Handler).ServeHTTP(w, r)
	}))
	defer srv.Close()
	var users []testidp.User
	for _, n := range []string{"ana", "bob", "cy"} {
		users = append(users, testidp.User{Subject: "sub-" + n, Username: n, Email: n + "@example.org", EmailVerified: true})
	}
	idp := testkit.StartIdP(t, testidp.Config{
		Users:                   users,
		Clients:                 []testidp.Client{{ID: "alpd", Secret: "s3cret", RedirectURIs: []string{srv.URL + "/signin/callback/example.org"}}},
		AutoLogin:               true,
		NonceInRefreshedIDToken: true,
		DeadRefreshTokenError:   "invalid_request",
	})

	logs := &testkit.LockedBuffer{}
	s := natstest.RunJetStream(t)
	b, err := broker.New(broker.Config{Name: "alpd", Tenants: []string{"example.org"}, PublicURL: srv.URL,
		InsecureCookies: true, RecheckGrace: time.Hour,
		IdPs: []signin.TenantIdP{{Tenant: "example.org", Issuer: idp.Issuer(), ClientID: "alpd", ClientSecret: "s3cret",
			EmailDomains: []string{"example.org"}}}},
		broker.Deps{NATS: natstest.Connect(t, s), KeyStore: keystore.NewMemory(),
			Logger: slog.New(slog.NewJSONHandler(logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	h.Store(b.Handler())
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = b.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()
	<-b.Started()
	if err := b.StartError(); err != nil {
		t.Fatal(err)
	}
	id := map[string]string{}
	for _, u := range users {
		jar, _ := cookiejar.New(nil)
		browser := &http.Client{Jar: jar, Timeout: 10 * time.Second}
		resp, err := browser.Get(srv.URL + "/signin?tenant=example.org&login_hint=" + u.Username)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		p, err := b.Identity().Store().PersonBySubject(t.Context(), "example.org", idp.Issuer(), u.Subject)
		if err != nil {
			t.Fatalf("no person %s after sign-in: %v", u.Username, err)
		}
		id[u.Username] = p.ID
	}
	rc := b.Identity().Recheck()
	const failed = "identity: re-check with the IdP failed"

	// The nonce in refreshed ID tokens is accepted, and every rotated token
	// is kept: the IdP revokes the family when a spent one comes back.
	for i := range 3 {
		if err := rc.Recheck(ctx, "example.org", id["ana"]); err != nil {
			t.Fatalf("recheck %d of ana: %v", i, err)
		}
	}
	if got := logs.Records(failed); len(got) != 0 {
		t.Fatalf("a good re-check was logged as failed: %v", got)
	}
	// Each of them stored the IdP's rotated token: the sign-in's grant and
	// three more.
	st, err := b.Bus().JetStream().Stream(ctx, "ALPD_IDENTITY")
	if err != nil {
		t.Fatal(err)
	}
	anaGrants := "alp.identity.example_org.idptoken." + id["ana"]
	info, err := st.Info(ctx, jetstream.WithSubjectFilter(anaGrants))
	if err != nil {
		t.Fatal(err)
	}
	if n := info.State.Subjects[anaGrants]; n != 4 {
		t.Fatalf("%d grants stored for ana, want 4 (sign-in and three re-checks)", n)
	}

	// The new ID token fails its checks: the re-check fails (within the
	// grace period), the rotated token is kept and works next time.
	idp.SetRefreshedIDTokenNonce("forged")
	if err := rc.Recheck(ctx, "example.org", id["bob"]); err != nil {
		t.Fatalf("recheck of bob with a forged nonce, within the grace period: %v", err)
	}
	idp.SetRefreshedIDTokenNonce("")
	if err := rc.Recheck(ctx, "example.org", id["bob"]); err != nil {
		t.Fatalf("recheck of bob after the forged nonce: the rotated token was lost: %v", err)
	}
	got := logs.Records(failed)
	if len(got) != 1 || got[0]["person_id"] != id["bob"] || got[0]["tenant"] != "example.org" || got[0]["issuer"] != idp.Issuer() ||
		got[0]["within_grace"] != true || got[0]["attempt"] != float64(1) || !strings.Contains(got[0]["err"].(string), "nonce") {
		t.Fatalf("failed re-check log lines %v", got)
	}
	if again := logs.Records("identity: re-check with the IdP succeeded again"); len(again) != 1 || again[0]["person_id"] != id["bob"] {
		t.Fatalf("recovery log lines %v", again)
	}

	// The IdP is down: within the grace period, and logged with the code.
	idp.SetDown(true)
	for range 2 {
		if err := rc.Recheck(ctx, "example.org", id["ana"]); err != nil {
			t.Fatalf("recheck within the grace period: %v", err)
		}
	}
	idp.SetDown(false)
	got = logs.Records(failed)[1:]
	if len(got) != 2 || got[0]["person_id"] != id["ana"] || got[0]["error_code"] != "temporarily_unavailable" ||
		got[0]["within_grace"] != true || got[1]["attempt"] != float64(2) {
		t.Fatalf("IdP down log lines %v", got)
	}

	// A dead refresh token answered with invalid_request: sign in again now,
	// not in an hour.
	if err := idp.DisableUser("sub-cy"); err != nil {
		t.Fatal(err)
	}
	if err := rc.Recheck(ctx, "example.org", id["cy"]); !errors.Is(err, identity.ErrPersonDisabled) {
		t.Fatalf("recheck of cy with a dead refresh token: %v, want ErrPersonDisabled", err)
	}
	refused := logs.Records("identity: the IdP refused the person's refresh token; they must sign in again")
	if len(refused) != 1 || refused[0]["person_id"] != id["cy"] || refused[0]["error_code"] != "invalid_request" {
		t.Fatalf("refusal log lines %v", refused)
	}

	if all := logs.String(); strings.Contains(all, "@example.org") {
		t.Fatal("an address in the logs")
	}
	// The kept grant (refresh token and nonce) is sealed on the stream.
	m, err := st.GetLastMsgForSubject(ctx, anaGrants)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(m.Data, []byte("alpd-idp-grant")) || bytes.Contains(m.Data, []byte(`"rt"`)) {
		t.Fatal("the IdP grant is stored in the clear")
	}
}

package identity_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alpd-project/alpd/broker"
	"github.com/alpd-project/alpd/internal/keystore"
	"github.com/alpd-project/alpd/internal/natstest"
	"github.com/alpd-project/alpd/internal/signin"
	"github.com/alpd-project/alpd/internal/testidp"
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
	idp, err := testidp.New(testidp.Config{
		Users:     []testidp.User{{Subject: "sub-ana", Username: "ana", Password: "pw", Email: "ana@example.org", EmailVerified: true}},
		Clients:   []testidp.Client{{ID: "alpd", Secret: "s3cret", RedirectURIs: []string{srv.URL + "/signin/callback/example.org"}}},
		AutoLogin: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := idp.Start(""); err != nil {
		t.Fatal(err)
	}
	defer idp.Close()

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

package identity_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/alpd-project/alpd/broker"
	identityv1 "github.com/alpd-project/alpd/gen/alp/identity/v1"
	alpv1 "github.com/alpd-project/alpd/gen/alp/v1"
	"github.com/alpd-project/alpd/internal/keystore"
	"github.com/alpd-project/alpd/internal/natstest"
	"github.com/alpd-project/alpd/internal/signin"
	"github.com/alpd-project/alpd/internal/testidp"
	"github.com/alpd-project/alpd/internal/testkit"
)

// site is a broker behind one public URL, with a test IdP as the tenant's
// IdP; restart replaces both (the test IdP comes back on another port,
// with another issuer, as it did at every restart before finding 10).
type site struct {
	t   *testing.T
	srv *httptest.Server
	h   atomic.Value
	ns  *server.Server
	ks  keystore.KeyStore
	b   *broker.Broker
	idp *testidp.IdP
	// stop ends the current broker and IdP.
	stop func()
}

func newSite(t *testing.T) *site {
	s := &site{t: t, ns: natstest.RunJetStream(t), ks: keystore.NewMemory()}
	s.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.h.Load().(http.Handler).ServeHTTP(w, r)
	}))
	t.Cleanup(s.srv.Close)
	s.start()
	t.Cleanup(func() { s.stop() })
	return s
}

func (s *site) start() {
	t := s.t
	idp := testkit.StartIdP(t, testidp.Config{
		Users:     []testidp.User{{Subject: "test-ana", Username: "ana", Email: "ana@example.org", EmailVerified: true}},
		Clients:   []testidp.Client{{ID: "alpd", Secret: "s3cret", RedirectURIs: []string{s.srv.URL + "/signin/callback/example.org"}}},
		AutoLogin: true,
	})
	b, err := broker.New(broker.Config{Name: "alpd", Tenants: []string{"example.org"}, PublicURL: s.srv.URL, InsecureCookies: true,
		IdPs: []signin.TenantIdP{{Tenant: "example.org", Issuer: idp.Issuer(), ClientID: "alpd", ClientSecret: "s3cret",
			EmailDomains: []string{"example.org"}}}},
		broker.Deps{NATS: natstest.Connect(t, s.ns), KeyStore: s.ks})
	if err != nil {
		t.Fatal(err)
	}
	s.h.Store(b.Handler())
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = b.Run(ctx); close(done) }()
	<-b.Started()
	if err := b.StartError(); err != nil {
		t.Fatal(err)
	}
	s.b, s.idp = b, idp
	s.stop = func() { cancel(); <-done; _ = idp.Close() }
}

func (s *site) restart() { s.stop(); s.start() }

func (s *site) rpc() identityv1.IdentityServiceClient {
	conn, err := s.b.Client(alpv1.Role_ROLE_IDENTITY)
	if err != nil {
		s.t.Fatal(err)
	}
	return identityv1.NewIdentityServiceClient(conn)
}

// browser is a person's browser at the site.
type browser struct {
	s *site
	c *http.Client
}

func (s *site) browser() *browser {
	jar, _ := cookiejar.New(nil)
	return &browser{s: s, c: &http.Client{Jar: jar, Timeout: 15 * time.Second}}
}

// signIn runs the sign-in and returns the final status and error code.
func (b *browser) signIn() (int, string) {
	resp, err := b.c.Get(b.s.srv.URL + "/signin?tenant=example.org&login_hint=ana&return=/signin/session")
	if err != nil {
		b.s.t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	var e struct {
		Error struct{ Code string } `json:"error"`
	}
	_ = json.Unmarshal(body, &e)
	return resp.StatusCode, e.Error.Code
}

// session is GET /signin/session: the person id and CSRF token.
func (b *browser) session() (personID, csrf string) {
	resp, err := b.c.Get(b.s.srv.URL + signin.PathSession)
	if err != nil {
		b.s.t.Fatal(err)
	}
	defer resp.Body.Close()
	var v struct {
		PersonID string `json:"person_id"`
		CSRF     string `json:"csrf"`
	}
	if resp.StatusCode != http.StatusOK || json.NewDecoder(resp.Body).Decode(&v) != nil {
		b.s.t.Fatalf("GET /signin/session: %d", resp.StatusCode)
	}
	return v.PersonID, v.CSRF
}

func (b *browser) post(path, csrf, contentType, body string) (int, string) {
	req, _ := http.NewRequest(http.MethodPost, b.s.srv.URL+path, strings.NewReader(body))
	req.Header.Set("Origin", b.s.srv.URL)
	req.Header.Set("X-CSRF-Token", csrf)
	req.Header.Set("Content-Type", contentType)
	c := *b.c
	c.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	resp, err := c.Do(req)
	if err != nil {
		b.s.t.Fatal(err)
	}
	defer resp.Body.Close()
	var e struct {
		Error struct{ Code string } `json:"error"`
	}
	_ = json.NewDecoder(resp.Body).Decode(&e)
	return resp.StatusCode, e.Error.Code
}

func (b *browser) mintPAT(csrf string) (int, string) {
	return b.post("/v1/pats", csrf, "application/json", `{"name":"cli","scopes":["alp.read"]}`)
}

// copyOf is another browser holding a copy of b's cookies (a stolen or
// second-device copy of the session).
func (b *browser) copyOf() *browser {
	u, _ := url.Parse(b.s.srv.URL)
	o := b.s.browser()
	o.c.Jar.SetCookies(u, b.c.Jar.Cookies(u))
	return o
}

// Finding 12: signing out ends the session on the server: a copy of the
// cookie taken before sign-out can no longer mint a personal access token
// (before, it could until the cookie expired). An operator's
// RevokePersonSessions ends every session of the person.
func TestSignOutAndRevocationEndSessions(t *testing.T) {
	s := newSite(t)
	b := s.browser()
	if st, code := b.signIn(); st != http.StatusOK {
		t.Fatalf("sign-in: %d %s", st, code)
	}
	personID, csrf := b.session()
	if st, code := b.mintPAT(csrf); st != http.StatusCreated {
		t.Fatalf("PAT with a live session: %d %s", st, code)
	}
	stolen := b.copyOf()
	if st, code := b.post(signin.PathSignOut, "", "application/x-www-form-urlencoded", url.Values{"csrf": {csrf}}.Encode()); st != http.StatusSeeOther {
		t.Fatalf("sign-out: %d %s", st, code)
	}
	if st, code := stolen.mintPAT(csrf); st != http.StatusUnauthorized || code != signin.CodeSessionRevoked {
		t.Fatalf("PAT with the cookie after sign-out: %d %s, want 401 %s", st, code, signin.CodeSessionRevoked)
	}

	// Signed in again on two devices; the operator signs the person out
	// everywhere.
	if st, code := b.signIn(); st != http.StatusOK {
		t.Fatalf("sign-in again: %d %s", st, code)
	}
	again, csrf2 := b.session()
	if again != personID {
		t.Fatalf("another person after signing in again: %s, %s", again, personID)
	}
	second := b.copyOf()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := s.rpc().RevokePersonSessions(ctx, &identityv1.RevokePersonSessionsRequest{Tenant: "example.org", PersonId: personID, Reason: "laptop lost"}); err != nil {
		t.Fatal(err)
	}
	for _, br := range []*browser{b, second} {
		if st, code := br.mintPAT(csrf2); st != http.StatusUnauthorized || code != signin.CodeSessionRevoked {
			t.Fatalf("PAT after the operator's revocation: %d %s", st, code)
		}
	}
	if _, err := s.rpc().RevokePersonSessions(ctx, &identityv1.RevokePersonSessionsRequest{Tenant: "example.org", PersonId: "p_nobody"}); status.Code(err) != codes.NotFound {
		t.Fatalf("unknown person: %v", err)
	}
	// A new sign-in works again.
	if st, code := b.signIn(); st != http.StatusOK {
		t.Fatalf("sign-in after revocation: %d %s", st, code)
	}
	_, csrf3 := b.session()
	if st, code := b.mintPAT(csrf3); st != http.StatusCreated {
		t.Fatalf("PAT after signing in again: %d %s", st, code)
	}
}

// Finding 10, end to end: the test IdP restarts on another port, so the
// same person arrives from another issuer. Before, a second person was
// bound for ana@example.org (and the first one's tokens kept sending as
// her). Now the sign-in is refused with 409 address_taken until an
// operator re-binds the address; then it is the same person.
func TestIssuerChangeNeedsRebinding(t *testing.T) {
	s := newSite(t)
	b := s.browser()
	if st, code := b.signIn(); st != http.StatusOK {
		t.Fatalf("sign-in: %d %s", st, code)
	}
	ana, _ := b.session()
	oldIssuer := s.idp.Issuer()

	s.restart()
	if s.idp.Issuer() == oldIssuer {
		t.Fatal("the test IdP came back with the same issuer: the test shows nothing")
	}
	fresh := s.browser()
	if st, code := fresh.signIn(); st != http.StatusConflict || code != signin.CodeAddressTaken {
		t.Fatalf("sign-in from the new issuer: %d %s, want 409 %s", st, code, signin.CodeAddressTaken)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	id := s.rpc()
	for _, bad := range []*identityv1.RebindPersonRequest{
		{Tenant: "example.org", Issuer: s.idp.Issuer(), Subject: "test-ana"},
		{Tenant: "example.org", PersonId: ana, Address: "ana@example.org", Issuer: s.idp.Issuer(), Subject: "test-ana"},
		{Tenant: "other.example", Address: "ana@example.org", Issuer: s.idp.Issuer(), Subject: "test-ana"},
		{Tenant: "example.org", Address: "ana@example.org", Issuer: "not a url", Subject: "test-ana"},
	} {
		if _, err := id.RebindPerson(ctx, bad); status.Code(err) != codes.InvalidArgument {
			t.Errorf("%v: %v, want InvalidArgument", bad, err)
		}
	}
	if _, err := id.RebindPerson(ctx, &identityv1.RebindPersonRequest{Tenant: "example.org", Address: "nobody@example.org",
		Issuer: s.idp.Issuer(), Subject: "x"}); status.Code(err) != codes.NotFound {
		t.Errorf("unknown address: %v", err)
	}
	res, err := id.RebindPerson(ctx, &identityv1.RebindPersonRequest{Tenant: "example.org", Address: "ana@example.org",
		Issuer: s.idp.Issuer(), Subject: "test-ana", Reason: "test IdP moved"})
	if err != nil || res.GetPersonId() != ana {
		t.Fatalf("re-binding: %v, %v", res, err)
	}
	if st, code := fresh.signIn(); st != http.StatusOK {
		t.Fatalf("sign-in after re-binding: %d %s", st, code)
	}
	if got, _ := fresh.session(); got != ana {
		t.Fatalf("after re-binding the person is %s, want %s", got, ana)
	}
}

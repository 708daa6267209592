package api_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alpd-project/alpd/broker"
	"github.com/alpd-project/alpd/internal/alp"
	"github.com/alpd-project/alpd/internal/keystore"
	"github.com/alpd-project/alpd/internal/natstest"
	"github.com/alpd-project/alpd/internal/signin"
	"github.com/alpd-project/alpd/internal/streams"
	"github.com/alpd-project/alpd/internal/testidp"
	"github.com/alpd-project/alpd/internal/testkit"
)

const tenant = "example.org"

// site is a whole broker (all six services on a real NATS) behind one
// loopback URL, with a test IdP as the tenant's: people sign in with real
// web sessions, agents hold real personal access tokens. "adm" has the
// admin role; "ana" and "lee" do not.
type site struct {
	t   *testing.T
	srv *httptest.Server
	b   *broker.Broker
}

func newSite(t *testing.T) *site {
	t.Helper()
	var h atomic.Value
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.Load().(http.Handler).ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	user := func(name string, roles ...string) testidp.User {
		return testidp.User{Subject: "sub-" + name, Username: name, Email: name + "@" + tenant, EmailVerified: true, Roles: roles}
	}
	idp := testkit.StartIdP(t, testidp.Config{
		Users:     []testidp.User{user("ana"), user("lee"), user("adm", "viewer", alp.AdminRole)},
		Clients:   []testidp.Client{{ID: "alpd", Secret: "s3cret", RedirectURIs: []string{srv.URL + "/signin/callback/" + tenant}}},
		AutoLogin: true,
	})
	b, err := broker.New(broker.Config{Name: "alpd", Tenants: []string{tenant}, PublicURL: srv.URL, InsecureCookies: true,
		IdPs: []signin.TenantIdP{{Tenant: tenant, Issuer: idp.Issuer(), ClientID: "alpd", ClientSecret: "s3cret", EmailDomains: []string{tenant}}}},
		broker.Deps{NATS: natstest.Connect(t, natstest.RunJetStream(t)), KeyStore: keystore.NewMemory()})
	if err != nil {
		t.Fatal(err)
	}
	h.Store(b.Handler())
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = b.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	<-b.Started()
	if err := b.StartError(); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 20*time.Second, b.Ready, "broker ready")
	return &site{t: t, srv: srv, b: b}
}

// events is how many events policy's stream holds: a refused write must
// not change it.
func (s *site) events() uint64 {
	s.t.Helper()
	st, err := s.b.Bus().JetStream().Stream(context.Background(), s.b.Bus().StreamName(streams.Policy))
	if err != nil {
		s.t.Fatal(err)
	}
	info, err := st.Info(context.Background())
	if err != nil {
		s.t.Fatal(err)
	}
	return info.State.Msgs
}

// unchanged fails if policy's stream holds another number of events than
// before.
func (s *site) unchanged(what string, before uint64) {
	s.t.Helper()
	if n := s.events(); n != before {
		s.t.Errorf("%s: policy's stream holds %d events, %d before: a refusal stored something", what, n, before)
	}
}

// person is someone's browser, signed in.
type person struct {
	s        *site
	c        *http.Client
	ID, csrf string
}

func (s *site) signIn(username string) *person {
	s.t.Helper()
	jar, _ := cookiejar.New(nil)
	p := &person{s: s, c: &http.Client{Jar: jar, Timeout: 15 * time.Second}}
	resp, err := p.c.Get(s.srv.URL + "/signin?tenant=" + tenant + "&login_hint=" + username + "&return=" + signin.PathSession)
	if err != nil {
		s.t.Fatal(err)
	}
	var v struct {
		PersonID string `json:"person_id"`
		CSRF     string `json:"csrf"`
	}
	err = json.NewDecoder(resp.Body).Decode(&v)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || err != nil || v.PersonID == "" || v.CSRF == "" {
		s.t.Fatalf("sign-in of %s: %d %v %+v", username, resp.StatusCode, err, v)
	}
	p.ID, p.csrf = v.PersonID, v.CSRF
	return p
}

// answer is one HTTP answer: status, body and, for a problem, its code.
type answer struct {
	Status int
	Header http.Header
	Body   []byte
	Code   string
}

func (a answer) String() string { return fmt.Sprintf("%d %s", a.Status, a.Body) }

func (a answer) decode(t *testing.T, v any) {
	t.Helper()
	if err := json.Unmarshal(a.Body, v); err != nil {
		t.Fatalf("answer %s: %v", a, err)
	}
}

// problems is a refusal's "problems" member.
func (a answer) problems(t *testing.T) []map[string]any {
	t.Helper()
	var p struct {
		Problems []map[string]any `json:"problems"`
	}
	a.decode(t, &p)
	return p.Problems
}

func do(t *testing.T, c *http.Client, req *http.Request) answer {
	t.Helper()
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	a := answer{Status: resp.StatusCode, Header: resp.Header, Body: body}
	var p struct {
		Code string `json:"code"`
	}
	if strings.HasPrefix(resp.Header.Get("Content-Type"), "application/problem+json") && json.Unmarshal(body, &p) == nil {
		a.Code = p.Code
	}
	return a
}

// req builds a request to the site; headers are name, value pairs.
func (s *site) req(method, path string, body []byte, headers ...string) *http.Request {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	r, err := http.NewRequest(method, s.srv.URL+path, rd)
	if err != nil {
		s.t.Fatal(err)
	}
	for i := 0; i+1 < len(headers); i += 2 {
		r.Header.Set(headers[i], headers[i+1])
	}
	return r
}

// get reads path with the person's session.
func (p *person) get(path string) answer {
	p.s.t.Helper()
	return do(p.s.t, p.c, p.s.req(http.MethodGet, path, nil))
}

// write sends a state-changing request from the site's own pages: Origin
// and the CSRF token, and the extra headers.
func (p *person) write(method, path string, body []byte, headers ...string) answer {
	p.s.t.Helper()
	return do(p.s.t, p.c, p.s.req(method, path, body, append([]string{"Origin", p.s.srv.URL, "X-CSRF-Token", p.csrf}, headers...)...))
}

// forged is write without the CSRF token (a cross-site form would be so).
func (p *person) forged(method, path string, body []byte, headers ...string) answer {
	p.s.t.Helper()
	return do(p.s.t, p.c, p.s.req(method, path, body, append([]string{"Origin", p.s.srv.URL}, headers...)...))
}

// anonymous sends a request with no credential.
func (s *site) anonymous(method, path string, body []byte, headers ...string) answer {
	s.t.Helper()
	return do(s.t, http.DefaultClient, s.req(method, path, body, headers...))
}

// agent is an agent holding a personal access token of a person.
type agent struct {
	s     *site
	token string
}

// pat mints the person a personal access token with scopes and waits
// until the broker accepts it (identity's stream reaches ingress's
// projection a moment after the mint).
func (p *person) pat(scopes ...string) *agent {
	p.s.t.Helper()
	body, _ := json.Marshal(map[string]any{"name": "test agent", "scopes": scopes})
	a := p.write(http.MethodPost, "/v1/pats", body, "Content-Type", "application/json")
	var minted struct {
		Token string `json:"token"`
	}
	a.decode(p.s.t, &minted)
	if a.Status != http.StatusCreated || !strings.HasPrefix(minted.Token, "alppat_") {
		p.s.t.Fatalf("PAT: %s", a)
	}
	ag := &agent{s: p.s, token: minted.Token}
	testkit.Eventually(p.s.t, 10*time.Second, func() error {
		if got := ag.do(http.MethodGet, "/v1/rules", nil); got.Status == http.StatusUnauthorized {
			return fmt.Errorf("the PAT is not known yet: %s", got)
		}
		return nil
	}, "the broker accepts the PAT")
	return ag
}

func (a *agent) do(method, path string, body []byte, headers ...string) answer {
	a.s.t.Helper()
	return do(a.s.t, http.DefaultClient, a.s.req(method, path, body, append([]string{"Authorization", "Bearer " + a.token}, headers...)...))
}

// want fails unless got has status and, when given, code.
func want(t *testing.T, what string, got answer, status int, code string) {
	t.Helper()
	if got.Status != status || (code != "" && got.Code != code) {
		t.Fatalf("%s: %s; want %d %s", what, got, status, code)
	}
}

// Package webuitest runs page packages in tests behind a real sign-in:
// a test OpenID provider (internal/testidp), identity's internal/signin
// service with its session records in memory, and a browser with a cookie
// jar that signs in through the IdP exactly as a person does. Pages see
// real session cookies, real CSRF tokens and real freshness checks.
package webuitest

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alpd-project/alpd/internal/httproute"
	"github.com/alpd-project/alpd/internal/signin"
	"github.com/alpd-project/alpd/internal/testidp"
	"github.com/alpd-project/alpd/internal/testkit"
	"github.com/alpd-project/alpd/internal/webui"
)

// Tenant is the rig's organization.
const Tenant = "example.org"

// People of the rig: Username is the login hint, PersonID what the Binder
// answers for them.
var (
	Alice = User{Username: "alice", Address: "alice@example.org", PersonID: "person-alice", Roles: []string{"alp.admin"}}
	Bob   = User{Username: "bob", Address: "bob@example.org", PersonID: "person-bob"}
)

// User is a person of the test IdP.
type User struct {
	Username, Address, PersonID string
	Roles                       []string
}

// Rig is a test web server with sign-in.
type Rig struct {
	t      testing.TB
	URL    string
	SignIn *signin.Service
	UI     *webui.UI
	offset atomic.Int64
}

// New starts the rig; routes is called once the sign-in exists and
// answers the page routes to mount (beside the sign-in's own and the
// style sheet).
func New(t testing.TB, routes func(*Rig) []httproute.Route) *Rig {
	t.Helper()
	r := &Rig{t: t}
	mux := http.NewServeMux()
	srv := httptest.NewUnstartedServer(mux)
	r.URL = "http://" + srv.Listener.Addr().String()

	users := []testidp.User{}
	dir := map[string]string{}
	for _, u := range []User{Alice, Bob} {
		users = append(users, testidp.User{Subject: "sub-" + u.Username, Username: u.Username, Roles: u.Roles})
		dir["sub:sub-"+u.Username] = u.Address
	}
	idp := testkit.StartIdP(t, testidp.Config{AutoLogin: true, Users: users,
		Clients: []testidp.Client{{ID: "alpd", Secret: "alpd-secret", RedirectURIs: []string{r.URL + signin.PathCallback + Tenant}}}})
	svc, err := signin.New(t.Context(), signin.Config{
		Sessions:  &memSessions{m: map[string]bool{}},
		PublicURL: r.URL,
		Insecure:  true,
		HashKey:   testkit.RandKey(),
		BlockKey:  testkit.RandKey(),
		Now:       func() time.Time { return time.Now().Add(time.Duration(r.offset.Load())) },
		Tenants: []signin.TenantIdP{{Tenant: Tenant, Issuer: idp.Issuer(), ClientID: "alpd", ClientSecret: "alpd-secret",
			Directory: dir}},
	}, binder{}, keeper{})
	if err != nil {
		t.Fatalf("signin.New: %v", err)
	}
	r.SignIn = svc
	r.UI = webui.New(webui.Options{Sessions: svc})
	all := append(svc.Routes(), webui.Routes()...)
	all = append(all, routes(r)...)
	if err := httproute.Mount(mux, all); err != nil {
		t.Fatalf("mount: %v", err)
	}
	srv.Start()
	t.Cleanup(srv.Close)
	return r
}

// Advance moves the sign-in's clock (a session older than FreshMaxAge is
// no longer fresh).
func (r *Rig) Advance(d time.Duration) { r.offset.Add(int64(d)) }

// Browser is a client with a cookie jar that follows redirects through the
// IdP and stops at every redirect back to the rig.
func (r *Rig) Browser() *http.Client {
	jar, err := cookiejar.New(nil)
	if err != nil {
		r.t.Fatal(err)
	}
	return &http.Client{Jar: jar, Timeout: 15 * time.Second, CheckRedirect: func(req *http.Request, via []*http.Request) error {
		if len(via) > 10 {
			return errors.New("too many redirects")
		}
		if strings.HasPrefix(req.URL.String(), r.URL+"/") {
			return http.ErrUseLastResponse
		}
		return nil
	}}
}

// SignInAs signs u in on a new browser and answers it with the session's
// CSRF token.
func (r *Rig) SignInAs(u User) (*http.Client, string) {
	r.t.Helper()
	c := r.Browser()
	q := url.Values{"tenant": {Tenant}, "login_hint": {u.Username}, "return": {"/"}}
	a := r.Get(c, signin.PathSignIn+"?"+q.Encode())
	if a.Status != http.StatusFound && a.Status != http.StatusSeeOther || !strings.HasPrefix(a.Location, r.URL+signin.PathCallback) {
		r.t.Fatalf("sign-in of %s did not reach the callback: %d %q %s", u.Username, a.Status, a.Location, a.Body)
	}
	cb := r.Get(c, strings.TrimPrefix(a.Location, r.URL))
	if cb.Status != http.StatusSeeOther && cb.Status != http.StatusFound {
		r.t.Fatalf("callback of %s: %d %s", u.Username, cb.Status, cb.Body)
	}
	s := r.Get(c, signin.PathSession)
	var v struct {
		PersonID string `json:"person_id"`
		CSRF     string `json:"csrf"`
	}
	if s.Status != http.StatusOK || json.Unmarshal([]byte(s.Body), &v) != nil || v.PersonID != u.PersonID || v.CSRF == "" {
		r.t.Fatalf("session of %s: %d %s", u.Username, s.Status, s.Body)
	}
	return c, v.CSRF
}

// Answer is a response, read.
type Answer struct {
	Status   int
	Location string
	Header   http.Header
	Body     string
}

// Do sends req with c.
func (r *Rig) Do(c *http.Client, req *http.Request) Answer {
	r.t.Helper()
	resp, err := c.Do(req)
	if err != nil {
		r.t.Fatalf("%s %s: %v", req.Method, req.URL, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		r.t.Fatalf("%s %s: read: %v", req.Method, req.URL, err)
	}
	return Answer{Status: resp.StatusCode, Location: resp.Header.Get("Location"), Header: resp.Header, Body: string(b)}
}

// Get is GET path with c and the given header pairs ("Accept",
// "application/json", ...).
func (r *Rig) Get(c *http.Client, path string, header ...string) Answer {
	r.t.Helper()
	req, err := http.NewRequestWithContext(r.t.Context(), http.MethodGet, r.URL+path, nil)
	if err != nil {
		r.t.Fatal(err)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	return r.Do(c, req)
}

// Post is a form POST to path from this site (Origin is the rig's unless
// header sets another; an empty value removes it).
func (r *Rig) Post(c *http.Client, path string, form url.Values, header ...string) Answer {
	r.t.Helper()
	req, err := http.NewRequestWithContext(r.t.Context(), http.MethodPost, r.URL+path, strings.NewReader(form.Encode()))
	if err != nil {
		r.t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Origin", r.URL)
	for i := 0; i+1 < len(header); i += 2 {
		if header[i+1] == "" {
			req.Header.Del(header[i])
			continue
		}
		req.Header.Set(header[i], header[i+1])
	}
	return r.Do(c, req)
}

// memSessions keeps session records in memory.
type memSessions struct {
	mu sync.Mutex
	m  map[string]bool
}

func (s *memSessions) CreateSession(_ context.Context, sess *signin.Session) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.m[sess.Tenant+"/"+sess.ID] = true
	return nil
}

func (s *memSessions) CheckSession(_ context.Context, sess *signin.Session) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.m[sess.Tenant+"/"+sess.ID] {
		return signin.ErrSessionRevoked
	}
	return nil
}

func (s *memSessions) DeleteSession(_ context.Context, sess *signin.Session) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.m, sess.Tenant+"/"+sess.ID)
	return nil
}

// binder names people person-<username>.
type binder struct{}

func (binder) BindPerson(_ context.Context, _, _, subject, _ string, _ []string) (string, error) {
	return "person-" + strings.TrimPrefix(subject, "sub-"), nil
}

// keeper accepts the IdP grant and keeps nothing: the pages never refresh.
type keeper struct{}

func (keeper) KeepRefreshToken(context.Context, string, string, signin.IdPGrant) error { return nil }

package signin_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/alpd-project/alpd/internal/httpjson"
	"github.com/alpd-project/alpd/internal/natstest"
	"github.com/alpd-project/alpd/internal/signin"
	"github.com/alpd-project/alpd/internal/testidp"
	"github.com/alpd-project/alpd/internal/testkit"
)

const (
	mainTenant    = "example.org"
	otherTenant   = "other.example" // its IdP emits another tid than configured
	noOffTenant   = "nooffline.example"
	mainTID       = "7f3c2a10-0000-4000-8000-00000000a1pd"
	clientID      = "alpd"
	clientSecret  = "alpd-client-secret"
	otherIdPTID   = "99999999-0000-4000-8000-000000000bad"
	expectedOther = "11111111-0000-4000-8000-000000000001"
)

// Users of the main IdP; Username is what login_hint takes.
var mainUsers = []testidp.User{
	// Directory hit by subject; roles.
	{Subject: "sub-alice", Username: "alice@example.org", Email: "alice@example.org", EmailVerified: true,
		Roles: []string{"approver", "admin"}, ImmutableID: "oid-alice"},
	// Immutable claim without '@', provisioned in the directory.
	{Subject: "sub-bob", Username: "bob", ImmutableID: "oid-bob", Email: "bob@elsewhere.example"},
	// Immutable claim that is an address in a verified domain.
	{Subject: "sub-carol", Username: "carol", ImmutableID: "Carol@Corp.Example.Org", Roles: []string{"viewer"}},
	// Verified email in an allow-listed domain.
	{Subject: "sub-dave", Username: "dave", Email: "dave@example.org", EmailVerified: true},
	// Unverified email.
	{Subject: "sub-erin", Username: "erin", Email: "erin@example.org", EmailVerified: false},
	// Verified email outside the allow-list.
	{Subject: "sub-frank", Username: "frank", Email: "frank@elsewhere.example", EmailVerified: true},
	// Immutable address claim outside the verified domains.
	{Subject: "sub-gina", Username: "gina", ImmutableID: "gina@unverified.example"},
	// Immutable claim not provisioned, no email.
	{Subject: "sub-hank", Username: "hank", ImmutableID: "oid-hank"},
	// The Binder refuses this one.
	{Subject: "sub-ivan", Username: "ivan", Email: "ivan@example.org", EmailVerified: true},
	// The Binder fails on this one.
	{Subject: "sub-judy", Username: "judy", Email: "judy@example.org", EmailVerified: true},
}

type bindCall struct {
	Tenant, Issuer, Subject, Address string
	Roles                            []string
}

type keepCall struct {
	Tenant, PersonID, RefreshToken string
	Grant                          signin.IdPGrant
}

type fakeBinder struct {
	mu    sync.Mutex
	calls []bindCall
}

func (b *fakeBinder) BindPerson(_ context.Context, tenant, issuer, subject, address string, roles []string) (string, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.calls = append(b.calls, bindCall{tenant, issuer, subject, address, slices.Clone(roles)})
	switch subject {
	case "sub-ivan":
		return "", &httpjson.Error{Status: http.StatusConflict, Code: "address_taken", Message: "the address belongs to someone else"}
	case "sub-judy":
		return "", errors.New("store exploded (secret detail)")
	}
	return "person-" + subject, nil
}

func (b *fakeBinder) all() []bindCall {
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Clone(b.calls)
}

type fakeKeeper struct {
	mu    sync.Mutex
	calls []keepCall
}

func (k *fakeKeeper) KeepRefreshToken(_ context.Context, tenant, personID string, g signin.IdPGrant) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.calls = append(k.calls, keepCall{tenant, personID, g.RefreshToken, g})
	return nil
}

func (k *fakeKeeper) all() []keepCall {
	k.mu.Lock()
	defer k.mu.Unlock()
	return slices.Clone(k.calls)
}

type rig struct {
	t        *testing.T
	srv      *httptest.Server
	public   string
	svc      *signin.Service
	idp      *testidp.IdP // main tenant
	otherIdP *testidp.IdP
	noOffIdP *testidp.IdP
	binder   *fakeBinder
	keeper   *fakeKeeper
	logs     *testkit.LockedBuffer
	sessions signin.KVSessions
	offset   atomic.Int64 // added to time.Now by the service's clock
	hashKey  []byte
	blockKey []byte
}

type rigOptions struct {
	plainHTTP bool // http + Insecure instead of https
	// mainIdP and mainTenant adjust the main tenant's test IdP and its
	// TenantIdP before they start.
	mainIdP    func(*testidp.Config)
	mainTenant func(*signin.TenantIdP)
}

func newRig(t *testing.T, opts rigOptions) *rig {
	t.Helper()
	h := &rig{t: t, binder: &fakeBinder{}, keeper: &fakeKeeper{}, logs: &testkit.LockedBuffer{}}

	mux := http.NewServeMux()
	h.srv = httptest.NewUnstartedServer(mux)
	scheme := "https"
	if opts.plainHTTP {
		scheme = "http"
	}
	h.public = scheme + "://" + h.srv.Listener.Addr().String()
	cb := func(tenant string) string { return h.public + "/signin/callback/" + tenant }
	client := func(tenant string) []testidp.Client {
		return []testidp.Client{{ID: clientID, Secret: clientSecret, RedirectURIs: []string{cb(tenant)}}}
	}

	mainCfg := testidp.Config{TenantID: mainTID, AutoLogin: true, Users: mainUsers, Clients: client(mainTenant)}
	if opts.mainIdP != nil {
		opts.mainIdP(&mainCfg)
	}
	h.idp = testkit.StartIdP(t, mainCfg)
	h.otherIdP = testkit.StartIdP(t, testidp.Config{TenantID: otherIdPTID, AutoLogin: true,
		Users:   []testidp.User{{Subject: "sub-olga", Username: "olga"}},
		Clients: client(otherTenant)})
	h.noOffIdP = startStrippingIdP(t, testidp.Config{AutoLogin: true,
		Users:   []testidp.User{{Subject: "sub-nina", Username: "nina"}},
		Clients: client(noOffTenant)})

	h.hashKey, h.blockKey = testkit.RandKey(), testkit.RandKey()
	h.sessions = newSessions(t)
	cfg := signin.Config{
		Sessions:  h.sessions,
		PublicURL: h.public,
		Insecure:  opts.plainHTTP,
		HashKey:   h.hashKey,
		BlockKey:  h.blockKey,
		Logger:    slog.New(slog.NewJSONHandler(h.logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
		Now:       func() time.Time { return time.Now().Add(time.Duration(h.offset.Load())) },
		Tenants: []signin.TenantIdP{
			{
				Tenant: mainTenant, Issuer: h.idp.Issuer(), ClientID: clientID, ClientSecret: clientSecret,
				TenantID:        mainTID,
				AddressClaim:    "oid",
				VerifiedDomains: []string{"example.org", "corp.example.org"},
				EmailDomains:    []string{"example.org"},
				Directory: map[string]string{
					"sub:sub-alice": "alice@example.org",
					"oid:oid-bob":   "Bob@Example.org",
				},
			},
			{
				Tenant: otherTenant, Issuer: h.otherIdP.Issuer(), ClientID: clientID, ClientSecret: clientSecret,
				TenantID:  expectedOther,
				Directory: map[string]string{"sub:sub-olga": "olga@other.example"},
			},
			{
				Tenant: noOffTenant, Issuer: h.noOffIdP.Issuer(), ClientID: clientID, ClientSecret: clientSecret,
				Directory: map[string]string{"sub:sub-nina": "nina@nooffline.example"},
			},
		},
	}
	if opts.mainTenant != nil {
		opts.mainTenant(&cfg.Tenants[0])
	}
	svc, err := signin.New(t.Context(), cfg, h.binder, h.keeper)
	if err != nil {
		t.Fatalf("signin.New: %v", err)
	}
	h.svc = svc

	mux.Handle("/signin", svc.Handler())
	mux.Handle("/signin/", svc.Handler())
	mux.Handle("/signout", svc.Handler())
	show := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s := signin.SessionFromContext(r.Context())
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(sessionView{Session: s, CSRF: s.CSRFToken()})
	})
	mux.Handle("/home", svc.RequireSession(show))
	mux.Handle("/approvals", svc.RequireFresh(show))
	mux.Handle("POST /act", svc.RequireCSRF(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusNoContent)
	})))

	if opts.plainHTTP {
		h.srv.Start()
	} else {
		h.srv.StartTLS()
	}
	t.Cleanup(h.srv.Close)
	return h
}

type sessionView struct {
	Session *signin.Session `json:"session"`
	CSRF    string          `json:"csrf"`
}

// newSessions is a session store on a bucket of a fresh JetStream server.
func newSessions(t *testing.T) signin.KVSessions {
	t.Helper()
	js, err := jetstream.New(natstest.Connect(t, natstest.RunJetStream(t)))
	if err != nil {
		t.Fatal(err)
	}
	kv, err := js.CreateOrUpdateKeyValue(t.Context(), signin.SessionsBucketConfig("T_SESSIONS", signin.DefaultSessionTTL, 1))
	if err != nil {
		t.Fatal(err)
	}
	return signin.KVSessions{KV: kv}
}

// startStrippingIdP serves a testidp whose token responses lose their
// refresh_token: an IdP that does not grant offline access.
func startStrippingIdP(t *testing.T, cfg testidp.Config) *testidp.IdP {
	t.Helper()
	var idp *testidp.IdP
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tokenURL, _ := url.Parse(idp.Endpoint().TokenURL)
		if r.Method != http.MethodPost || r.URL.Path != tokenURL.Path {
			idp.Handler().ServeHTTP(w, r)
			return
		}
		rec := httptest.NewRecorder()
		idp.Handler().ServeHTTP(rec, r)
		body := rec.Body.Bytes()
		m := map[string]any{}
		if json.Unmarshal(body, &m) == nil {
			delete(m, "refresh_token")
			body, _ = json.Marshal(m)
		}
		for k, v := range rec.Header() {
			if k != "Content-Length" {
				w.Header()[k] = v
			}
		}
		w.WriteHeader(rec.Code)
		_, _ = w.Write(body)
	}))
	cfg.Issuer = "http://" + srv.Listener.Addr().String()
	var err error
	idp, err = testidp.New(cfg)
	if err != nil {
		t.Fatalf("testidp.New: %v", err)
	}
	srv.Start()
	t.Cleanup(srv.Close)
	return idp
}

// browser returns a client with a cookie jar that trusts the broker's test
// certificate, follows redirects through the IdP and stops at any redirect
// back to the broker, so each broker step can be inspected.
func (h *rig) browser() *http.Client {
	jar, err := cookiejar.New(nil)
	if err != nil {
		h.t.Fatal(err)
	}
	c := *h.srv.Client()
	c.Jar = jar
	c.Timeout = 15 * time.Second
	c.CheckRedirect = func(req *http.Request, via []*http.Request) error {
		if len(via) > 10 {
			return errors.New("too many redirects")
		}
		if strings.HasPrefix(req.URL.String(), h.public+"/") {
			return http.ErrUseLastResponse
		}
		return nil
	}
	return &c
}

type answer struct {
	status   int
	location string
	cookies  []*http.Cookie
	header   http.Header
	body     string
	errCode  string
	errMsg   string
}

func do(t *testing.T, c *http.Client, req *http.Request) answer {
	t.Helper()
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", req.Method, req.URL, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	a := answer{status: resp.StatusCode, location: resp.Header.Get("Location"), cookies: resp.Cookies(), header: resp.Header, body: string(b)}
	var e struct {
		Error struct{ Code, Message string } `json:"error"`
	}
	if ct := resp.Header.Get("Content-Type"); (strings.HasPrefix(ct, "application/json") || ct == "application/problem+json") && json.Unmarshal(b, &e) == nil {
		a.errCode, a.errMsg = e.Error.Code, e.Error.Message
	}
	return a
}

func get(t *testing.T, c *http.Client, u string) answer {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, u, nil)
	if err != nil {
		t.Fatal(err)
	}
	return do(t, c, req)
}

func (h *rig) post(c *http.Client, path string, form url.Values, headers map[string]string) answer {
	h.t.Helper()
	req, err := http.NewRequestWithContext(h.t.Context(), http.MethodPost, h.public+path, strings.NewReader(form.Encode()))
	if err != nil {
		h.t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	return do(h.t, c, req)
}

// startSignIn runs /signin?<query> through the IdP and returns the IdP's
// redirect to the broker's callback (not yet followed).
func (h *rig) startSignIn(c *http.Client, query url.Values) string {
	h.t.Helper()
	a := get(h.t, c, h.public+"/signin?"+query.Encode())
	if a.status != http.StatusFound && a.status != http.StatusSeeOther {
		h.t.Fatalf("sign-in did not come back to the broker: %d %s %s", a.status, a.location, a.body)
	}
	if !strings.HasPrefix(a.location, h.public+"/signin/callback/") {
		h.t.Fatalf("IdP redirected to %q, want the broker's callback", a.location)
	}
	return a.location
}

// signIn runs a whole sign-in and returns the callback's answer.
func (h *rig) signIn(c *http.Client, tenant, hint, ret string, extra ...string) (answer, string) {
	h.t.Helper()
	q := url.Values{"tenant": {tenant}, "login_hint": {hint}}
	if ret != "" {
		q.Set("return", ret)
	}
	for i := 0; i+1 < len(extra); i += 2 {
		q.Set(extra[i], extra[i+1])
	}
	cb := h.startSignIn(c, q)
	return get(h.t, c, cb), cb
}

func (h *rig) session(c *http.Client) (int, sessionView) {
	h.t.Helper()
	a := get(h.t, c, h.public+"/home")
	var v sessionView
	if a.status == http.StatusOK {
		if err := json.Unmarshal([]byte(a.body), &v); err != nil {
			h.t.Fatalf("/home: %v: %s", err, a.body)
		}
	}
	return a.status, v
}

func cookieNamed(cs []*http.Cookie, name string) *http.Cookie {
	for _, c := range cs {
		if c.Name == name {
			return c
		}
	}
	return nil
}

func wantError(t *testing.T, a answer, status int, code string) {
	t.Helper()
	if a.status != status || a.errCode != code {
		t.Fatalf("want %d %s, got %d %q: %s", status, code, a.status, a.errCode, a.body)
	}
	if a.errMsg == "" {
		t.Errorf("error %s without a message", code)
	}
}

// waitNextSecond sleeps until the wall clock's second after t (auth_time has
// second resolution).
func waitNextSecond(t time.Time) {
	time.Sleep(time.Until(t.Truncate(time.Second).Add(time.Second + 20*time.Millisecond)))
}

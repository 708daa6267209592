package clientreg_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	alpv1 "github.com/alpd-project/alpd/gen/alp/v1"
	"github.com/alpd-project/alpd/internal/alp"
	"github.com/alpd-project/alpd/internal/bus"
	"github.com/alpd-project/alpd/internal/identitystore"
	"github.com/alpd-project/alpd/internal/keystore"
	"github.com/alpd-project/alpd/internal/natstest"
	"github.com/alpd-project/alpd/internal/signin"
	"github.com/alpd-project/alpd/internal/streams"
	"github.com/alpd-project/alpd/internal/testidp"
	"github.com/alpd-project/alpd/internal/testkit"
	"github.com/alpd-project/alpd/services/identity/clientreg"
)

const (
	tenant = "example.org"
	other  = "other.example"
)

var hosted = []string{tenant, other}

// rig is a broker's identity stream on a real JetStream server and a store
// following it.
type rig struct {
	b     *bus.Bus
	ks    keystore.KeyStore
	store *identitystore.Store
}

func newRig(t *testing.T) *rig {
	t.Helper()
	nc := natstest.Connect(t, natstest.RunJetStream(t))
	b, err := bus.New(nc, bus.Options{Namespace: "t", Registerer: prometheus.NewRegistry()})
	if err != nil {
		t.Fatal(err)
	}
	def, _ := streams.ByName(streams.Identity)
	if _, err := b.EnsureStream(context.Background(), def.Spec(hosted, streams.Limits{})); err != nil {
		t.Fatal(err)
	}
	e := &rig{b: b, ks: keystore.NewMemory()}
	for _, tn := range hosted {
		if _, err := e.ks.Generate(context.Background(), tn, alpv1.KeyPurpose_KEY_PURPOSE_DATA); err != nil {
			t.Fatal(err)
		}
	}
	e.store = e.open(t)
	return e
}

func (e *rig) open(t *testing.T) *identitystore.Store {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	s, err := identitystore.Open(ctx, e.b, e.ks, hosted, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s
}

// streamContains reports whether any message of the identity stream
// (data or headers) contains needle.
func (e *rig) streamContains(t *testing.T, needle []byte) bool {
	t.Helper()
	ctx := context.Background()
	st, err := e.b.JetStream().Stream(ctx, e.b.StreamName(streams.Identity))
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Msgs == 0 {
		t.Fatal("the identity stream is empty")
	}
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq; seq++ {
		m, err := st.GetMsg(ctx, seq)
		if err != nil {
			if err == jetstream.ErrMsgNotFound {
				continue
			}
			t.Fatal(err)
		}
		if bytes.Contains(m.Data, needle) {
			return true
		}
		for k, vs := range m.Header {
			if bytes.Contains([]byte(k), needle) {
				return true
			}
			for _, v := range vs {
				if bytes.Contains([]byte(v), needle) {
					return true
				}
			}
		}
	}
	return false
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// web is a broker's HTTP: sign-in through a test IdP, the admin, PAT and
// registration endpoints.
type web struct {
	t      *testing.T
	rig    *rig
	srv    *httptest.Server
	public string
	reg    *clientreg.Registrar
}

var users = []testidp.User{
	{Subject: "sub-alice", Username: "alice", Roles: []string{"viewer", alp.AdminRole}},
	{Subject: "sub-bob", Username: "bob", Roles: []string{"viewer"}},
}

type noKeeper struct{}

func (noKeeper) KeepRefreshToken(context.Context, string, string, signin.IdPGrant) error { return nil }

func newWeb(t *testing.T, e *rig, tweak func(*clientreg.Config)) *web {
	t.Helper()
	w := &web{t: t, rig: e}
	mux := http.NewServeMux()
	w.srv = httptest.NewUnstartedServer(mux)
	w.public = "http://" + w.srv.Listener.Addr().String()

	idp := testkit.StartIdP(t, testidp.Config{AutoLogin: true, Users: users, Clients: []testidp.Client{{
		ID: "alpd", Secret: "alpd-secret", RedirectURIs: []string{w.public + "/signin/callback/" + tenant},
	}}})

	sessionsKV, err := e.b.JetStream().CreateOrUpdateKeyValue(t.Context(), signin.SessionsBucketConfig("T_SESSIONS", signin.DefaultSessionTTL, 1))
	if err != nil {
		t.Fatal(err)
	}
	svc, err := signin.New(t.Context(), signin.Config{
		Sessions:  signin.KVSessions{KV: sessionsKV},
		PublicURL: w.public, Insecure: true, HashKey: testkit.RandKey(), BlockKey: testkit.RandKey(),
		Tenants: []signin.TenantIdP{{
			Tenant: tenant, Issuer: idp.Issuer(), ClientID: "alpd", ClientSecret: "alpd-secret",
			Directory: map[string]string{"sub:sub-alice": "alice@example.org", "sub:sub-bob": "bob@example.org"},
		}},
	}, identitystore.PersonIDBinder{Store: e.store}, noKeeper{})
	if err != nil {
		t.Fatal(err)
	}
	cfg := clientreg.Config{
		Store: e.store, Sessions: svc, Bus: e.b,
		Scopes:           []string{"alp.read", "alp.send"},
		MaxPATsPerPerson: 5,
		DCRRate:          1000, DCRBurst: 1000,
	}
	if tweak != nil {
		tweak(&cfg)
	}
	w.reg, err = clientreg.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"/signin", "/signin/", "/signout"} {
		mux.Handle(p, svc.Handler())
	}
	mux.Handle("/whoami", svc.RequireSession(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		s := signin.SessionFromContext(r.Context())
		_ = json.NewEncoder(rw).Encode(map[string]string{"person_id": s.PersonID, "csrf": s.CSRFToken()})
	})))
	mux.Handle("/v1/admin/clients", w.reg.AdminHandler())
	mux.Handle("/v1/admin/clients/", w.reg.AdminHandler())
	mux.Handle("/v1/pats", w.reg.PATHandler())
	mux.Handle("/v1/pats/", w.reg.PATHandler())
	mux.Handle("/oauth/"+tenant+"/register", w.reg.DCRHandler(tenant))
	w.srv.Start()
	t.Cleanup(w.srv.Close)
	return w
}

// user is a browser signed in as someone.
type user struct {
	c        *http.Client
	personID string
	csrf     string
}

func (w *web) signIn(hint string) *user {
	w.t.Helper()
	jar, err := cookiejar.New(nil)
	if err != nil {
		w.t.Fatal(err)
	}
	u := &user{c: &http.Client{Jar: jar, Timeout: 15 * time.Second}}
	q := url.Values{"tenant": {tenant}, "login_hint": {hint}, "return": {"/whoami"}}
	resp, err := u.c.Get(w.public + "/signin?" + q.Encode())
	if err != nil {
		w.t.Fatal(err)
	}
	defer resp.Body.Close()
	var who struct {
		PersonID string `json:"person_id"`
		CSRF     string `json:"csrf"`
	}
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		w.t.Fatalf("sign-in of %s: %d %s", hint, resp.StatusCode, body)
	}
	if err := json.Unmarshal(body, &who); err != nil || who.PersonID == "" || who.CSRF == "" {
		w.t.Fatalf("sign-in of %s: %v %s", hint, err, body)
	}
	u.personID, u.csrf = who.PersonID, who.CSRF
	return u
}

// anonymous is a browser without a session.
func anonymous() *user { return &user{c: &http.Client{Timeout: 15 * time.Second}} }

type answer struct {
	status  int
	header  http.Header
	body    string
	errCode string // {"error":{"code"}} or {"error":"…"}
	errMsg  string
}

type reqOpt struct {
	noCSRF      bool
	origin      string // default the public origin; "-" for none
	contentType string // default application/json
	raw         []byte // body as is
}

func (w *web) do(u *user, method, path string, body any, o reqOpt) answer {
	w.t.Helper()
	var rd io.Reader
	switch {
	case o.raw != nil:
		rd = bytes.NewReader(o.raw)
	case body != nil:
		b, err := json.Marshal(body)
		if err != nil {
			w.t.Fatal(err)
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(w.t.Context(), method, w.public+path, rd)
	if err != nil {
		w.t.Fatal(err)
	}
	if rd != nil {
		ct := o.contentType
		if ct == "" {
			ct = "application/json"
		}
		req.Header.Set("Content-Type", ct)
	}
	switch o.origin {
	case "":
		req.Header.Set("Origin", w.public)
	case "-":
	default:
		req.Header.Set("Origin", o.origin)
	}
	if !o.noCSRF && u.csrf != "" {
		req.Header.Set("X-CSRF-Token", u.csrf)
	}
	return doReq(w.t, u.c, req)
}

func doReq(t *testing.T, c *http.Client, req *http.Request) answer {
	t.Helper()
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", req.Method, req.URL, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	a := answer{status: resp.StatusCode, header: resp.Header, body: string(b)}
	var nested struct {
		Error struct{ Code, Message string } `json:"error"`
	}
	var flat struct {
		Error       string `json:"error"`
		Description string `json:"error_description"`
	}
	if json.Unmarshal(b, &nested) == nil && nested.Error.Code != "" {
		a.errCode, a.errMsg = nested.Error.Code, nested.Error.Message
	} else if json.Unmarshal(b, &flat) == nil && flat.Error != "" {
		a.errCode, a.errMsg = flat.Error, flat.Description
	}
	return a
}

func wantErr(t *testing.T, a answer, status int, code string) {
	t.Helper()
	if a.status != status || a.errCode != code {
		t.Fatalf("want %d %s, got %d %q: %s", status, code, a.status, a.errCode, a.body)
	}
	if a.errMsg == "" {
		t.Errorf("error %s without a message: %s", code, a.body)
	}
	if ct := a.header.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") && ct != "application/problem+json" {
		t.Errorf("error answered as %q", ct)
	}
}

func decode[T any](t *testing.T, a answer) T {
	t.Helper()
	var v T
	if err := json.Unmarshal([]byte(a.body), &v); err != nil {
		t.Fatalf("decoding %s: %v", a.body, err)
	}
	return v
}

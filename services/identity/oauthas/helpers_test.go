package oauthas_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"html"
	"io"
	"log/slog"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"os"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/oauth2"

	alpv1 "github.com/alpd-project/alpd/gen/alp/v1"
	"github.com/alpd-project/alpd/internal/accesstoken"
	"github.com/alpd-project/alpd/internal/bus"
	"github.com/alpd-project/alpd/internal/httproute"
	"github.com/alpd-project/alpd/internal/identitystore"
	"github.com/alpd-project/alpd/internal/keystore"
	"github.com/alpd-project/alpd/internal/natstest"
	"github.com/alpd-project/alpd/internal/signin"
	"github.com/alpd-project/alpd/internal/streams"
	"github.com/alpd-project/alpd/internal/testidp"
	"github.com/alpd-project/alpd/internal/testkit"
	"github.com/alpd-project/alpd/services/identity/oauthas"
)

const (
	tenantA = "a.example"
	tenantB = "b.example"

	// Redirect URIs of the test clients; nothing listens there: the
	// browser stops at them.
	redirectURI      = "http://127.0.0.1:9/callback"
	otherRedirectURI = "http://127.0.0.1:9/other"

	scopeRead = "alp.read"
	scopeSend = "alp.send"
)

// Every secret a test sees (tokens, codes, client secrets) is recorded here;
// TestMain fails if any of them appears in the logs.
var (
	logs      testkit.LockedBuffer
	secretsMu sync.Mutex
	secrets   = map[string]string{}
)

func recordSecret(kind, s string) string {
	if s != "" {
		secretsMu.Lock()
		secrets[s] = kind
		secretsMu.Unlock()
	}
	return s
}

func TestMain(m *testing.M) {
	// op logs through slog.Default.
	slog.SetDefault(slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug})))
	code := m.Run()
	out := logs.String()
	if path := os.Getenv("OAUTHAS_TEST_LOGS"); path != "" {
		_ = os.WriteFile(path, []byte(out), 0o600)
	}
	secretsMu.Lock()
	for s, kind := range secrets {
		if strings.Contains(out, s) {
			fmt.Fprintf(os.Stderr, "FAIL: a %s appears in the logs\n", kind)
			code = 1
		}
	}
	n := len(secrets)
	secretsMu.Unlock()
	if code == 0 && n == 0 {
		fmt.Fprintln(os.Stderr, "FAIL: no secrets were recorded for the log check")
		code = 1
	}
	if code == 0 && !strings.Contains(out, "oauthas: grant issued") {
		fmt.Fprintln(os.Stderr, "FAIL: the log check saw none of the package's logs")
		code = 1
	}
	os.Exit(code)
}

// recheck is a settable PersonRechecker.
type recheck struct {
	mu    sync.Mutex
	err   error
	calls int
}

func (r *recheck) Recheck(_ context.Context, _, _ string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls++
	return r.err
}

func (r *recheck) set(err error) {
	r.mu.Lock()
	r.err = err
	r.mu.Unlock()
}

type nopKeeper struct{}

func (nopKeeper) KeepRefreshToken(context.Context, string, string, signin.IdPGrant) error { return nil }

// rig is a broker hosting tenants A and B: identity store on a real
// JetStream, key store, sign-in through two test IdPs, and the
// authorization servers, over real HTTP on 127.0.0.1.
type rig struct {
	// consent is how the person answers consent pages ("allow", "deny";
	// "" leaves the page as the answer).
	consent string
	t       *testing.T
	public  string
	srv     *httptest.Server
	store   *identitystore.Store
	keys    *keystore.MemoryStore
	kv      jetstream.KeyValue
	as      *oauthas.Server
	recheck *recheck
	admin   map[string]string // tenant -> admin person id
	mcp     string            // the main resource
	rest    string            // another resource
	// cfg and deps built as; replica builds another server from them.
	cfg  oauthas.Config
	deps oauthas.Deps
}

type rigOptions struct {
	noRecheck bool
	codeTTL   time.Duration
}

func newRig(t *testing.T, opts ...rigOptions) *rig {
	t.Helper()
	var o rigOptions
	if len(opts) > 0 {
		o = opts[0]
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	h := &rig{t: t, recheck: &recheck{}, admin: map[string]string{}, consent: "allow"}
	log := slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))

	// Identity stream and store.
	nc := natstest.Connect(t, natstest.RunJetStream(t), nats.MaxReconnects(-1))
	b, err := bus.New(nc, bus.Options{Namespace: "t", Registerer: prometheus.NewRegistry()})
	if err != nil {
		t.Fatal(err)
	}
	def, _ := streams.ByName(streams.Identity)
	tenants := []string{tenantA, tenantB}
	if _, err := b.EnsureStream(ctx, def.Spec(tenants, streams.Limits{})); err != nil {
		t.Fatal(err)
	}
	// Token keys, and the data keys wrapping the person map.
	h.keys = keystore.NewMemory()
	for _, tn := range tenants {
		for _, p := range []alpv1.KeyPurpose{accesstoken.Purpose, alpv1.KeyPurpose_KEY_PURPOSE_DATA} {
			if _, err := h.keys.Generate(ctx, tn, p); err != nil {
				t.Fatal(err)
			}
		}
	}
	h.store, err = identitystore.Open(ctx, b, h.keys, tenants, log)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(h.store.Close)
	h.kv, err = b.JetStream().CreateOrUpdateKeyValue(ctx, oauthas.CodesBucketConfig("t_oauth_codes", 1))
	if err != nil {
		t.Fatal(err)
	}

	mux := http.NewServeMux()
	h.srv = httptest.NewUnstartedServer(mux)
	h.public = "http://" + h.srv.Listener.Addr().String()
	h.mcp = h.public + "/mcp"
	h.rest = h.public + "/v1"

	// People sign in through one test IdP per tenant.
	idpA := testkit.StartIdP(t, testidp.Config{AutoLogin: true,
		Users:   []testidp.User{{Subject: "sub-ana", Username: "ana"}, {Subject: "sub-cy", Username: "cy"}},
		Clients: []testidp.Client{{ID: "alpd", Secret: "idp-secret", RedirectURIs: []string{h.public + signin.PathCallback + tenantA}}}})
	idpB := testkit.StartIdP(t, testidp.Config{AutoLogin: true,
		Users:   []testidp.User{{Subject: "sub-bo", Username: "bo"}},
		Clients: []testidp.Client{{ID: "alpd", Secret: "idp-secret", RedirectURIs: []string{h.public + signin.PathCallback + tenantB}}}})
	sessionsKV, err := b.JetStream().CreateOrUpdateKeyValue(ctx, signin.SessionsBucketConfig("t_sessions", signin.DefaultSessionTTL, 1))
	if err != nil {
		t.Fatal(err)
	}
	sessions, err := signin.New(ctx, signin.Config{
		Sessions:  signin.KVSessions{KV: sessionsKV},
		PublicURL: h.public, Insecure: true, HashKey: testkit.RandKey(), BlockKey: testkit.RandKey(), Logger: log,
		Tenants: []signin.TenantIdP{
			{Tenant: tenantA, Issuer: idpA.Issuer(), ClientID: "alpd", ClientSecret: "idp-secret",
				Directory: map[string]string{"sub:sub-ana": "ana@a.example", "sub:sub-cy": "cy@a.example"}},
			{Tenant: tenantB, Issuer: idpB.Issuer(), ClientID: "alpd", ClientSecret: "idp-secret",
				Directory: map[string]string{"sub:sub-bo": "bo@b.example"}},
		},
	}, identitystore.PersonIDBinder{Store: h.store}, nopKeeper{})
	if err != nil {
		t.Fatal(err)
	}

	deps := oauthas.Deps{Store: h.store, Keys: h.keys, Sessions: sessions, Codes: h.kv, Recheck: h.recheck, Logger: log}
	deps.Registration = func(tenant string) httproute.Route {
		return httproute.Route{Caller: httproute.Public, BodyLimit: 1 << 10,
			Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.WriteHeader(http.StatusCreated)
				_, _ = io.WriteString(w, "registration stub of "+tenant)
			})}
	}
	if o.noRecheck {
		deps.Recheck = nil
	}
	h.cfg = oauthas.Config{
		ConsentKey: testConsentKey,
		PublicURL:  h.public, Tenants: tenants, Resource: h.mcp, Resources: []string{h.rest},
		Scopes: []string{scopeRead, scopeSend}, CodeTTL: o.codeTTL,
		RegistrationEndpoint: h.public + "/oauth/{tenant}/register", ClientIDMetadataDocumentSupported: true,
	}
	h.deps = deps
	h.as, err = oauthas.New(h.cfg, deps)
	if err != nil {
		t.Fatal(err)
	}
	mux.Handle(signin.PathSignIn, sessions.Handler())
	mux.Handle(signin.PathSignIn+"/", sessions.Handler())
	for _, p := range h.as.Patterns() {
		mux.Handle(p, h.as.Handler())
	}
	h.srv.Start()
	t.Cleanup(h.srv.Close)

	// An admin per tenant registers the confidential clients.
	for _, tn := range tenants {
		p, err := h.store.BindPerson(ctx, tn, "https://admin-idp.example", "sub-admin", "admin@"+tn, []string{"admin"})
		if err != nil {
			t.Fatal(err)
		}
		h.admin[tn] = p.ID
	}
	return h
}

// replica serves another authorization server of the same broker (same
// store, code bucket, sign-in and keys) on a listener of its own, as a
// second identity replica would, and returns its host:port. The browser's
// session cookie is good there too (cookies do not depend on the port).
func (h *rig) replica() string {
	h.t.Helper()
	mux := http.NewServeMux()
	srv := httptest.NewUnstartedServer(mux)
	cfg := h.cfg
	cfg.PublicURL = "http://" + srv.Listener.Addr().String()
	as, err := oauthas.New(cfg, h.deps)
	if err != nil {
		h.t.Fatal(err)
	}
	for _, p := range as.Patterns() {
		mux.Handle(p, as.Handler())
	}
	srv.Start()
	h.t.Cleanup(srv.Close)
	return srv.Listener.Addr().String()
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// testClient is a registered client and how the tests use it.
type testClient struct {
	tenant string
	id     string
	secret string // confidential clients
	kind   alpv1.ClientKind
}

func (h *rig) confidential(tenant, id string) testClient {
	h.t.Helper()
	secret := recordSecret("client secret", "alpcs_"+strings.Repeat("s", 8)+rand.Text())
	_, err := h.store.RegisterClient(ctxT(h.t), identitystore.ClientSpec{
		Tenant: tenant, ClientID: id, Kind: alpv1.ClientKind_CLIENT_KIND_CONFIDENTIAL,
		RedirectURIs: []string{redirectURI, otherRedirectURI}, Name: "company agent",
		SecretSHA256: identitystore.HashSecret(secret), RegisteredBy: h.admin[tenant],
	})
	if err != nil {
		h.t.Fatal(err)
	}
	return testClient{tenant: tenant, id: id, secret: secret, kind: alpv1.ClientKind_CLIENT_KIND_CONFIDENTIAL}
}

func (h *rig) publicClient(tenant, id string) testClient {
	h.t.Helper()
	_, err := h.store.RegisterClient(ctxT(h.t), identitystore.ClientSpec{
		Tenant: tenant, ClientID: id, Kind: alpv1.ClientKind_CLIENT_KIND_PUBLIC_DCR,
		RedirectURIs: []string{redirectURI, otherRedirectURI}, Name: "consumer agent",
	})
	if err != nil {
		h.t.Fatal(err)
	}
	return testClient{tenant: tenant, id: id, kind: alpv1.ClientKind_CLIENT_KIND_PUBLIC_DCR}
}

func (h *rig) issuer(tenant string) string { return h.public + "/oauth/" + tenant }

// oauth2Config is a golang.org/x/oauth2 client of c at c's tenant.
func (h *rig) oauth2Config(c testClient, tenant string) *oauth2.Config {
	style := oauth2.AuthStyleInParams
	if c.secret != "" {
		style = oauth2.AuthStyleInHeader
	}
	return &oauth2.Config{
		ClientID: c.id, ClientSecret: c.secret, RedirectURL: redirectURI, Scopes: []string{scopeRead, scopeSend},
		Endpoint: oauth2.Endpoint{
			AuthURL: h.issuer(tenant) + "/authorize", TokenURL: h.issuer(tenant) + "/token", AuthStyle: style,
		},
	}
}

// browser is a cookie-jar client that follows redirects through sign-in
// and the IdP and stops at the client's redirect URIs.
func (h *rig) browser() *http.Client {
	jar, err := cookiejar.New(nil)
	if err != nil {
		h.t.Fatal(err)
	}
	return &http.Client{Jar: jar, Timeout: 15 * time.Second,
		CheckRedirect: func(req *http.Request, via []*http.Request) error {
			if len(via) > 15 {
				return errors.New("too many redirects")
			}
			if strings.HasPrefix(req.URL.String(), "http://127.0.0.1:9/") {
				return http.ErrUseLastResponse
			}
			return nil
		}}
}

type answer struct {
	status   int
	location string
	body     string
	header   http.Header
}

// testConsentKey signs consent tickets in tests.
var testConsentKey = bytes.Repeat([]byte{7}, 32)

var hiddenField = regexp.MustCompile(`name="(csrf|request)" value="([^"]*)"`)

func (h *rig) get(c *http.Client, u string) answer {
	h.t.Helper()
	resp, err := c.Get(u)
	if err != nil {
		h.t.Fatalf("GET %s: %v", u, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode == http.StatusOK && strings.HasSuffix(resp.Request.URL.Path, oauthas.PathConsent) && h.consent != "" {
		return h.decide(c, resp.Request.URL.String(), string(b), h.consent)
	}
	return answer{status: resp.StatusCode, location: resp.Header.Get("Location"), body: string(b), header: resp.Header}
}

// decide answers the consent page (body, at pageURL) with decision, as
// the person's browser does.
func (h *rig) decide(c *http.Client, pageURL, body, decision string) answer {
	h.t.Helper()
	form := url.Values{"decision": {decision}}
	for _, m := range hiddenField.FindAllStringSubmatch(body, -1) {
		form.Set(m[1], html.UnescapeString(m[2]))
	}
	req, _ := http.NewRequest(http.MethodPost, pageURL, strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Origin", h.public)
	resp, err := c.Do(req)
	if err != nil {
		h.t.Fatalf("POST consent: %v", err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return answer{status: resp.StatusCode, location: resp.Header.Get("Location"), body: string(b), header: resp.Header}
}

// authorize runs an authorization request in browser c and returns the
// redirect to the client (its query).
func (h *rig) authorize(c *http.Client, authURL string) url.Values {
	h.t.Helper()
	a := h.get(c, authURL)
	if a.status != http.StatusFound || !strings.HasPrefix(a.location, "http://127.0.0.1:9/") {
		h.t.Fatalf("authorization did not come back to the client: %d %q %s", a.status, a.location, a.body)
	}
	u, err := url.Parse(a.location)
	if err != nil {
		h.t.Fatal(err)
	}
	q := u.Query()
	recordSecret("authorization code", q.Get("code"))
	return q
}

// flow is one authorization of client c by the person with login_hint
// hint, at tenant's authorization server.
type flow struct {
	cfg      *oauth2.Config
	verifier string
	state    string
	code     string
	resource string
}

func (h *rig) startFlow(c testClient, tenant, hint string, browser *http.Client) *flow {
	h.t.Helper()
	f := &flow{cfg: h.oauth2Config(c, tenant), verifier: oauth2.GenerateVerifier(), state: rand.Text(), resource: h.mcp}
	recordSecret("code verifier", f.verifier)
	u := f.cfg.AuthCodeURL(f.state, oauth2.S256ChallengeOption(f.verifier),
		oauth2.SetAuthURLParam("resource", f.resource), oauth2.SetAuthURLParam("login_hint", hint))
	q := h.authorize(browser, u)
	if q.Get("error") != "" {
		h.t.Fatalf("authorization failed: %v", q)
	}
	if q.Get("state") != f.state || q.Get("iss") != h.issuer(tenant) {
		h.t.Fatalf("redirect %v: want state %q and iss %q", q, f.state, h.issuer(tenant))
	}
	f.code = q.Get("code")
	if !strings.HasPrefix(f.code, "alpac_") {
		h.t.Fatalf("code %q", f.code)
	}
	return f
}

func (h *rig) exchange(f *flow, extra ...oauth2.AuthCodeOption) (*oauth2.Token, error) {
	opts := append([]oauth2.AuthCodeOption{oauth2.VerifierOption(f.verifier), oauth2.SetAuthURLParam("resource", f.resource)}, extra...)
	tok, err := f.cfg.Exchange(ctxT(h.t), f.code, opts...)
	if tok != nil {
		recordSecret("access token", tok.AccessToken)
		recordSecret("refresh token", tok.RefreshToken)
	}
	return tok, err
}

// login runs a whole flow and exchange, returning the tokens.
func (h *rig) login(c testClient, hint string) (*flow, *oauth2.Token) {
	h.t.Helper()
	f := h.startFlow(c, c.tenant, hint, h.browser())
	tok, err := h.exchange(f)
	if err != nil {
		h.t.Fatalf("exchange: %v", err)
	}
	return f, tok
}

// tokenResponse is a token endpoint answer.
type tokenResponse struct {
	status       int
	AccessToken  string `json:"access_token"`
	TokenType    string `json:"token_type"`
	RefreshToken string `json:"refresh_token"`
	ExpiresIn    int    `json:"expires_in"`
	Scope        string `json:"scope"`
	Error        string `json:"error"`
	Description  string `json:"error_description"`
	body         string
	header       http.Header
}

// post sends form to tenant's endpoint path as client c (its secret in
// Basic auth when it has one and basic is set).
func (h *rig) post(tenant, path string, c testClient, basic bool, form url.Values) tokenResponse {
	h.t.Helper()
	if !basic || c.secret == "" {
		form.Set("client_id", c.id)
		if c.secret != "" {
			form.Set("client_secret", c.secret)
		}
	}
	req, err := http.NewRequestWithContext(ctxT(h.t), http.MethodPost, h.issuer(tenant)+path, strings.NewReader(form.Encode()))
	if err != nil {
		h.t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	if basic && c.secret != "" {
		req.SetBasicAuth(url.QueryEscape(c.id), url.QueryEscape(c.secret))
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		h.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var tr tokenResponse
	_ = json.Unmarshal(b, &tr)
	tr.status, tr.body, tr.header = resp.StatusCode, string(b), resp.Header
	recordSecret("access token", tr.AccessToken)
	recordSecret("refresh token", tr.RefreshToken)
	return tr
}

func (h *rig) refresh(c testClient, refreshToken string, extra ...string) tokenResponse {
	h.t.Helper()
	form := url.Values{"grant_type": {"refresh_token"}, "refresh_token": {refreshToken}}
	for i := 0; i+1 < len(extra); i += 2 {
		form.Add(extra[i], extra[i+1])
	}
	return h.post(c.tenant, "/token", c, true, form)
}

func wantOAuthError(t *testing.T, tr tokenResponse, status int, code string) {
	t.Helper()
	if tr.status != status || tr.Error != code {
		t.Fatalf("want %d %s, got %d: %s", status, code, tr.status, tr.body)
	}
	if tr.AccessToken != "" || tr.RefreshToken != "" {
		t.Fatalf("error answer carries tokens: %s", tr.body)
	}
}

func wantRetrieveError(t *testing.T, err error, status int, code string) {
	t.Helper()
	var re *oauth2.RetrieveError
	if !errors.As(err, &re) {
		t.Fatalf("want an OAuth error %s, got %v", code, err)
	}
	if re.Response.StatusCode != status || re.ErrorCode != code {
		t.Fatalf("want %d %s, got %d %s (%s)", status, code, re.Response.StatusCode, re.ErrorCode, re.Body)
	}
}

// verifier verifies access tokens for resource, as ingress does.
func (h *rig) verifier(resource string) *accesstoken.Verifier {
	return &accesstoken.Verifier{
		Keys: accesstoken.FromKeyStore(h.keys), Resource: resource, Issuers: h.as.Issuers(), Revocations: h.store,
	}
}

func (h *rig) verify(token string) (*accesstoken.Claims, error) {
	return h.verifier(h.mcp).Verify(ctxT(h.t), token)
}

func (h *rig) grantOf(token string) identitystore.Grant {
	h.t.Helper()
	c, err := h.verify(token)
	if err != nil {
		h.t.Fatalf("verify: %v", err)
	}
	g, err := h.store.Grant(c.Tenant, c.GrantID)
	if err != nil {
		h.t.Fatal(err)
	}
	return g
}

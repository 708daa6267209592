package clientreg_test

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/time/rate"

	alpv1 "github.com/alpd-project/alpd/gen/alp/v1"
	"github.com/alpd-project/alpd/internal/identitystore"
	"github.com/alpd-project/alpd/services/identity/clientreg"
)

// dcrServer serves DCRHandler(tenant) at /register.
func dcrServer(t *testing.T, e *rig, tweak func(*clientreg.Config)) (*httptest.Server, *clientreg.Registrar) {
	t.Helper()
	cfg := clientreg.Config{Store: e.store, DCRRate: 1000, DCRBurst: 1000,
		// Tests name their remote address in a header.
		ClientIP: func(r *http.Request) string {
			if ip := r.Header.Get("X-Test-IP"); ip != "" {
				return ip
			}
			return "127.0.0.1"
		}}
	if tweak != nil {
		tweak(&cfg)
	}
	reg, err := clientreg.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("/register", reg.DCRHandler(tenant))
	mux.Handle("/unhosted/register", reg.DCRHandler("unhosted.example"))
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv, reg
}

func postRaw(t *testing.T, url, contentType string, body []byte, headers ...string) answer {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	return doReq(t, http.DefaultClient, req)
}

func postJSON(t *testing.T, url string, v any, headers ...string) answer {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return postRaw(t, url, "application/json", b, headers...)
}

func TestDCRHappyPath(t *testing.T) {
	e := newRig(t)
	srv, _ := dcrServer(t, e, nil)

	a := postJSON(t, srv.URL+"/register", map[string]any{
		"client_name":                "Claude Desktop",
		"redirect_uris":              []string{"http://127.0.0.1:33418/callback", "https://app.example/cb?x=1", "http://[::1]/cb", "http://localhost:8080/cb"},
		"token_endpoint_auth_method": "none",
		"grant_types":                []string{"authorization_code", "refresh_token"},
		"response_types":             []string{"code"},
		"scope":                      "alp.read",           // ignored
		"logo_uri":                   "https://x.example/", // ignored
	})
	if a.status != http.StatusCreated {
		t.Fatalf("status %d: %s", a.status, a.body)
	}
	if a.header.Get("Cache-Control") != "no-store" {
		t.Errorf("Cache-Control %q", a.header.Get("Cache-Control"))
	}
	r := decode[clientreg.RegistrationResponse](t, a)
	if !strings.HasPrefix(r.ClientID, "dcr_") || len(r.ClientID) != 4+26 {
		t.Errorf("client_id %q", r.ClientID)
	}
	if r.TokenEndpointAuthMethod != "none" || r.ClientName != "Claude Desktop" ||
		strings.Join(r.GrantTypes, " ") != "authorization_code refresh_token" || strings.Join(r.ResponseTypes, " ") != "code" {
		t.Errorf("answer %+v", r)
	}
	if d := time.Since(time.Unix(r.ClientIDIssuedAt, 0)); d < -2*time.Second || d > time.Minute {
		t.Errorf("client_id_issued_at %d", r.ClientIDIssuedAt)
	}
	if len(r.RedirectURIs) != 4 {
		t.Errorf("redirect_uris %v", r.RedirectURIs)
	}
	if strings.Contains(a.body, "client_secret") {
		t.Errorf("a public client got a secret: %s", a.body)
	}
	c, err := e.store.Client(tenant, r.ClientID)
	if err != nil {
		t.Fatal(err)
	}
	if c.Kind != alpv1.ClientKind_CLIENT_KIND_PUBLIC_DCR || c.RegisteredBy != identitystore.RegisteredByDCR ||
		c.Class() != alpv1.TrustClass_TRUST_CLASS_CONSUMER || !c.SecretSHA256.IsZero() || c.Name != "Claude Desktop" {
		t.Errorf("stored %+v", c)
	}

	// Minimal request: defaults.
	a = postJSON(t, srv.URL+"/register", map[string]any{"redirect_uris": []string{"https://app.example/cb"}})
	if a.status != http.StatusCreated {
		t.Fatalf("status %d: %s", a.status, a.body)
	}
	r2 := decode[clientreg.RegistrationResponse](t, a)
	if r2.ClientID == r.ClientID || strings.Join(r2.GrantTypes, " ") != "authorization_code" || r2.TokenEndpointAuthMethod != "none" {
		t.Errorf("answer %+v", r2)
	}
	if strings.Contains(a.body, "client_name") {
		t.Errorf("empty client_name in answer: %s", a.body)
	}

	// Charset parameter is fine.
	a = postRaw(t, srv.URL+"/register", "application/json; charset=UTF-8", []byte(`{"redirect_uris":["https://app.example/cb"]}`))
	if a.status != http.StatusCreated {
		t.Fatalf("status %d: %s", a.status, a.body)
	}
}

func TestDCRRejections(t *testing.T) {
	e := newRig(t)
	srv, _ := dcrServer(t, e, nil)
	ok := []string{"https://app.example/cb"}
	long := strings.Repeat("n", clientreg.MaxClientNameBytes+1)
	many := make([]string, clientreg.MaxRedirectURIs+1)
	for i := range many {
		many[i] = "https://app.example/cb" + strconv.Itoa(i)
	}
	cases := []struct {
		name string
		body any
		code string
		msg  string
	}{
		{"confidential basic", map[string]any{"redirect_uris": ok, "token_endpoint_auth_method": "client_secret_basic"}, "invalid_client_metadata", "organization admin"},
		{"confidential jwt", map[string]any{"redirect_uris": ok, "token_endpoint_auth_method": "private_key_jwt"}, "invalid_client_metadata", "organization admin"},
		{"no redirect uris", map[string]any{"client_name": "x"}, "invalid_redirect_uri", "at least one"},
		{"empty redirect uris", map[string]any{"redirect_uris": []string{}}, "invalid_redirect_uri", "at least one"},
		{"http not loopback", map[string]any{"redirect_uris": []string{"http://app.example/cb"}}, "invalid_redirect_uri", "loopback"},
		{"http 127.0.0.2", map[string]any{"redirect_uris": []string{"http://127.0.0.2/cb"}}, "invalid_redirect_uri", "loopback"},
		{"fragment", map[string]any{"redirect_uris": []string{"https://app.example/cb#frag"}}, "invalid_redirect_uri", "fragment"},
		{"empty fragment", map[string]any{"redirect_uris": []string{"https://app.example/cb#"}}, "invalid_redirect_uri", "fragment"},
		{"custom scheme", map[string]any{"redirect_uris": []string{"com.example.app:/cb"}}, "invalid_redirect_uri", "https"},
		{"javascript", map[string]any{"redirect_uris": []string{"javascript:alert(1)"}}, "invalid_redirect_uri", "https"},
		{"uppercase scheme", map[string]any{"redirect_uris": []string{"HTTPS://app.example/cb"}}, "invalid_redirect_uri", "lowercase"},
		{"relative", map[string]any{"redirect_uris": []string{"/cb"}}, "invalid_redirect_uri", "https"},
		{"no host", map[string]any{"redirect_uris": []string{"https:///cb"}}, "invalid_redirect_uri", "host"},
		{"user info", map[string]any{"redirect_uris": []string{"https://user:pw@app.example/cb"}}, "invalid_redirect_uri", "user information"},
		{"wildcard host", map[string]any{"redirect_uris": []string{"https://*.app.example/cb"}}, "invalid_redirect_uri", "host"},
		{"space", map[string]any{"redirect_uris": []string{"https://app.example/c b"}}, "invalid_redirect_uri", "spaces"},
		{"non-ascii", map[string]any{"redirect_uris": []string{"https://äpp.example/cb"}}, "invalid_redirect_uri", "non-ASCII"},
		{"ipv6 zone", map[string]any{"redirect_uris": []string{"http://[fe80::1%25en0]/cb"}}, "invalid_redirect_uri", ""},
		{"numeric host", map[string]any{"redirect_uris": []string{"https://1.2.3/cb"}}, "invalid_redirect_uri", "host"},
		{"too many", map[string]any{"redirect_uris": many}, "invalid_redirect_uri", "at most"},
		{"too long", map[string]any{"redirect_uris": []string{"https://app.example/" + strings.Repeat("a", 2100)}}, "invalid_redirect_uri", "bytes"},
		{"too long in all", map[string]any{"redirect_uris": []string{"https://app.example/" + strings.Repeat("a", 1500), "https://app.example/" + strings.Repeat("b", 1500), "https://app.example/" + strings.Repeat("c", 1500)}}, "invalid_redirect_uri", "in all"},
		{"client credentials", map[string]any{"redirect_uris": ok, "grant_types": []string{"client_credentials"}}, "invalid_client_metadata", "client_credentials"},
		{"implicit", map[string]any{"redirect_uris": ok, "grant_types": []string{"implicit"}}, "invalid_client_metadata", "implicit"},
		{"refresh only", map[string]any{"redirect_uris": ok, "grant_types": []string{"refresh_token"}}, "invalid_client_metadata", "authorization_code is required"},
		{"token response", map[string]any{"redirect_uris": ok, "response_types": []string{"token"}}, "invalid_client_metadata", "token"},
		{"name control", map[string]any{"redirect_uris": ok, "client_name": "evil\nname"}, "invalid_client_metadata", "control"},
		{"name bidi", map[string]any{"redirect_uris": ok, "client_name": "abc\u202egnp.exe"}, "invalid_client_metadata", "formatting"},
		{"name long", map[string]any{"redirect_uris": ok, "client_name": long}, "invalid_client_metadata", "at most"},
		{"wrong type", map[string]any{"redirect_uris": "https://app.example/cb"}, "invalid_client_metadata", "redirect_uris must be an array"},
		{"array", []string{"x"}, "invalid_client_metadata", "JSON object"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			a := postJSON(t, srv.URL+"/register", tc.body)
			wantErr(t, a, http.StatusBadRequest, tc.code)
			if !strings.Contains(a.errMsg, tc.msg) {
				t.Errorf("description %q does not mention %q", a.errMsg, tc.msg)
			}
		})
	}
	raw := []struct {
		name, ct string
		body     string
		status   int
		code     string
	}{
		{"null", "application/json", "null", 400, "invalid_client_metadata"},
		{"empty", "application/json", "", 400, "invalid_client_metadata"},
		{"trailing", "application/json", `{"redirect_uris":["https://app.example/cb"]} {}`, 400, "invalid_client_metadata"},
		{"syntax", "application/json", `{"redirect_uris":[`, 400, "invalid_client_metadata"},
		{"text/plain", "text/plain", `{"redirect_uris":["https://app.example/cb"]}`, 415, "invalid_request"},
		{"form", "application/x-www-form-urlencoded", `redirect_uris=https://app.example/cb`, 415, "invalid_request"},
		{"no content type", "", `{"redirect_uris":["https://app.example/cb"]}`, 415, "invalid_request"},
		{"latin1", "application/json; charset=iso-8859-1", `{"redirect_uris":["https://app.example/cb"]}`, 415, "invalid_request"},
		{"oversize", "application/json", `{"client_name":"` + strings.Repeat("x", 70<<10) + `"}`, 413, "invalid_request"},
	}
	for _, tc := range raw {
		t.Run(tc.name, func(t *testing.T) {
			wantErr(t, postRaw(t, srv.URL+"/register", tc.ct, []byte(tc.body)), tc.status, tc.code)
		})
	}
	t.Run("oversize chunked", func(t *testing.T) {
		// No Content-Length: the limit applies while reading.
		body := strings.NewReader(`{"client_name":"` + strings.Repeat("x", 70<<10) + `"}`)
		req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, srv.URL+"/register", struct{ *strings.Reader }{body})
		req.Header.Set("Content-Type", "application/json")
		wantErr(t, doReq(t, http.DefaultClient, req), http.StatusRequestEntityTooLarge, "invalid_request")
	})
	t.Run("GET", func(t *testing.T) {
		req, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, srv.URL+"/register", nil)
		a := doReq(t, http.DefaultClient, req)
		wantErr(t, a, http.StatusMethodNotAllowed, "invalid_request")
		if a.header.Get("Allow") != "POST" {
			t.Errorf("Allow %q", a.header.Get("Allow"))
		}
	})
	t.Run("unhosted tenant", func(t *testing.T) {
		wantErr(t, postJSON(t, srv.URL+"/unhosted/register", map[string]any{"redirect_uris": ok}), http.StatusNotFound, "invalid_request")
	})
}

func TestDCRRateLimit(t *testing.T) {
	e := newRig(t)
	srv, _ := dcrServer(t, e, func(c *clientreg.Config) {
		c.DCRRate, c.DCRBurst, c.DCRLimiterCapacity = rate.Every(time.Hour), 2, 3
	})
	body := map[string]any{"redirect_uris": []string{"https://app.example/cb"}}
	for i := range 2 {
		if a := postJSON(t, srv.URL+"/register", body, "X-Test-IP", "192.0.2.7"); a.status != http.StatusCreated {
			t.Fatalf("registration %d: %d %s", i, a.status, a.body)
		}
	}
	// Invalid requests count too.
	a := postJSON(t, srv.URL+"/register", map[string]any{}, "X-Test-IP", "192.0.2.7")
	wantErr(t, a, http.StatusTooManyRequests, "temporarily_unavailable")
	ra, err := strconv.Atoi(a.header.Get("Retry-After"))
	if err != nil || ra < 1 || ra > 3600 {
		t.Errorf("Retry-After %q", a.header.Get("Retry-After"))
	}
	// Another address has its own budget; an IPv6 /64 is one address.
	if a := postJSON(t, srv.URL+"/register", body, "X-Test-IP", "2001:db8:1:2::1"); a.status != http.StatusCreated {
		t.Fatalf("other address: %d %s", a.status, a.body)
	}
	if a := postJSON(t, srv.URL+"/register", body, "X-Test-IP", "2001:db8:1:2:ffff::9"); a.status != http.StatusCreated {
		t.Fatalf("same /64: %d %s", a.status, a.body)
	}
	wantErr(t, postJSON(t, srv.URL+"/register", body, "X-Test-IP", "2001:db8:1:2:abcd::1"), http.StatusTooManyRequests, "temporarily_unavailable")
}

// TestDCRLimiterFullTableIsFair: when the limiter's table is full, a new
// address still gets its budget (the least recently seen one is
// forgotten) instead of everyone being refused, and the addresses limited
// right now stay limited (issue 10, finding 6).
func TestDCRLimiterFullTableIsFair(t *testing.T) {
	e := newRig(t)
	srv, _ := dcrServer(t, e, func(c *clientreg.Config) {
		c.DCRRate, c.DCRBurst, c.DCRLimiterCapacity = rate.Every(time.Hour), 1, 3
	})
	body := map[string]any{"redirect_uris": []string{"https://app.example/cb"}}
	from := func(ip string) answer { return postJSON(t, srv.URL+"/register", body, "X-Test-IP", ip) }
	for _, ip := range []string{"192.0.2.1", "192.0.2.2", "192.0.2.3"} {
		if a := from(ip); a.status != http.StatusCreated {
			t.Fatalf("%s: %d %s", ip, a.status, a.body)
		}
	}
	// .2 and .3 are seen again (and refused): .1 is now the least recent.
	wantErr(t, from("192.0.2.2"), http.StatusTooManyRequests, "temporarily_unavailable")
	wantErr(t, from("192.0.2.3"), http.StatusTooManyRequests, "temporarily_unavailable")
	// The table is full; newcomers are served, each taking the place of the
	// least recently seen address.
	for _, ip := range []string{"198.51.100.1", "198.51.100.2"} {
		if a := from(ip); a.status != http.StatusCreated {
			t.Fatalf("new address %s with the table full: %d %s", ip, a.status, a.body)
		}
	}
	// .3 was seen more recently than anything evicted so far; it is still
	// limited.
	wantErr(t, from("192.0.2.3"), http.StatusTooManyRequests, "temporarily_unavailable")
}

// TestDCRAddressKeys: the limiter's key is the IPv4 address or the IPv6 /64,
// however the address is written (with a port, a zone, IPv4-mapped), and
// strings that are no address share one key instead of getting a budget
// each (issue 10, finding 6).
func TestDCRAddressKeys(t *testing.T) {
	body := map[string]any{"redirect_uris": []string{"https://app.example/cb"}}
	groups := [][]string{
		{"2001:db8:1:2::1", "[2001:db8:1:2::5]:4444", "2001:db8:1:2:ffff:ffff:ffff:ffff", "[2001:db8:1:2::9%eth0]:1", " 2001:db8:1:2::a "},
		{"203.0.113.9", "203.0.113.9:80", "[::ffff:203.0.113.9]:443", "::ffff:203.0.113.9"},
		{"not-an-address", "also not one", "unknown", "1.2.3"},
	}
	for _, g := range groups {
		t.Run(g[0], func(t *testing.T) {
			e := newRig(t)
			srv, _ := dcrServer(t, e, func(c *clientreg.Config) { c.DCRRate, c.DCRBurst = rate.Every(time.Hour), 1 })
			for i, ip := range g {
				a := postJSON(t, srv.URL+"/register", body, "X-Test-IP", ip)
				if i == 0 {
					if a.status != http.StatusCreated {
						t.Fatalf("first of %v: %d %s", g, a.status, a.body)
					}
					continue
				}
				if a.status != http.StatusTooManyRequests {
					t.Errorf("%q has a budget of its own (%d); it is the same key as %q", ip, a.status, g[0])
				}
			}
		})
	}
}

// TestDCRUnusedClientBounds: registration stops at the per-tenant and the
// global bound of unused dynamic clients (503 temporarily_unavailable with
// Retry-After), and a client's first use makes room (issue 10, finding 6).
func TestDCRUnusedClientBounds(t *testing.T) {
	e := newRig(t)
	srv, _ := dcrServer(t, e, func(c *clientreg.Config) {
		c.MaxUnusedDynamicClients, c.MaxUnusedDynamicClientsPerTenant = 3, 2
	})
	mux := http.NewServeMux()
	reg, err := clientreg.New(clientreg.Config{Store: e.store, DCRRate: 1000, DCRBurst: 1000,
		MaxUnusedDynamicClients: 3, MaxUnusedDynamicClientsPerTenant: 2})
	if err != nil {
		t.Fatal(err)
	}
	mux.Handle("/register", reg.DCRHandler(other))
	otherSrv := httptest.NewServer(mux)
	t.Cleanup(otherSrv.Close)

	body := map[string]any{"redirect_uris": []string{"https://app.example/cb"}}
	var first string
	for i := range 2 {
		a := postJSON(t, srv.URL+"/register", body, "X-Test-IP", "192.0.2."+strconv.Itoa(i+1))
		if a.status != http.StatusCreated {
			t.Fatalf("registration %d: %d %s", i, a.status, a.body)
		}
		if i == 0 {
			first = decode[clientreg.RegistrationResponse](t, a).ClientID
		}
	}
	// The tenant's bound, whoever asks.
	full := postJSON(t, srv.URL+"/register", body, "X-Test-IP", "198.51.100.7")
	wantErr(t, full, http.StatusServiceUnavailable, "temporarily_unavailable")
	if ra, err := strconv.Atoi(full.header.Get("Retry-After")); err != nil || ra < 1 {
		t.Errorf("Retry-After %q", full.header.Get("Retry-After"))
	}
	// Another tenant has room until the global bound.
	if a := postJSON(t, otherSrv.URL+"/register", body); a.status != http.StatusCreated {
		t.Fatalf("other tenant: %d %s", a.status, a.body)
	}
	wantErr(t, postJSON(t, otherSrv.URL+"/register", body), http.StatusServiceUnavailable, "temporarily_unavailable")

	// A client that is used no longer counts.
	if _, err := e.store.MarkClientUsed(ctxT(t), tenant, first); err != nil {
		t.Fatal(err)
	}
	if a := postJSON(t, srv.URL+"/register", body, "X-Test-IP", "198.51.100.8"); a.status != http.StatusCreated {
		t.Fatalf("after a first use: %d %s", a.status, a.body)
	}
	wantErr(t, postJSON(t, srv.URL+"/register", body, "X-Test-IP", "198.51.100.9"), http.StatusServiceUnavailable, "temporarily_unavailable")
}

func TestDCRRateLimitRemoteAddr(t *testing.T) {
	e := newRig(t)
	reg, err := clientreg.New(clientreg.Config{Store: e.store, DCRRate: rate.Every(time.Hour), DCRBurst: 1})
	if err != nil {
		t.Fatal(err)
	}
	h := reg.DCRHandler(tenant)
	post := func(remote string) int {
		req := httptest.NewRequest(http.MethodPost, "/register", strings.NewReader(`{"redirect_uris":["https://app.example/cb"]}`))
		req.Header.Set("Content-Type", "application/json")
		req.RemoteAddr = remote
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		return rec.Code
	}
	if c := post("203.0.113.5:1234"); c != http.StatusCreated {
		t.Fatalf("first: %d", c)
	}
	if c := post("203.0.113.5:999"); c != http.StatusTooManyRequests {
		t.Fatalf("second from the same host: %d", c)
	}
	if c := post("[::ffff:203.0.113.6]:1"); c != http.StatusCreated {
		t.Fatalf("other host: %d", c)
	}
	if c := post("[::ffff:203.0.113.6]:2"); c != http.StatusTooManyRequests {
		t.Fatalf("mapped address: %d", c)
	}
}

func TestNewValidates(t *testing.T) {
	e := newRig(t)
	bad := []clientreg.Config{
		{},
		{Store: e.store, Scopes: []string{"has space"}},
		{Store: e.store, MaxPATLifetime: time.Minute},
		{Store: e.store, DefaultPATLifetime: 100 * 24 * time.Hour},
		{Store: e.store, MaxPATsPerPerson: -1},
		{Store: e.store, DCRBurst: -1},
		{Store: e.store, MaxBodyBytes: -1},
	}
	for i, c := range bad {
		if _, err := clientreg.New(c); err == nil {
			t.Errorf("config %d accepted", i)
		}
	}
}

package clientreg_test

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	alpv1 "github.com/alpd-project/alpd/gen/alp/v1"
	"github.com/alpd-project/alpd/internal/identitystore"
	"github.com/alpd-project/alpd/services/identity/clientreg"
)

// docServer is an https server on 127.0.0.1 serving metadata documents.
type docServer struct {
	srv     *httptest.Server
	mu      sync.Mutex
	routes  map[string]http.HandlerFunc
	fetches atomic.Int64
}

func newDocServer(t *testing.T) *docServer {
	t.Helper()
	d := &docServer{routes: map[string]http.HandlerFunc{}}
	d.srv = httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		d.fetches.Add(1)
		d.mu.Lock()
		h := d.routes[r.URL.Path]
		d.mu.Unlock()
		if h == nil {
			http.NotFound(w, r)
			return
		}
		h(w, r)
	}))
	t.Cleanup(d.srv.Close)
	return d
}

func (d *docServer) url(path string) string { return d.srv.URL + path }

func (d *docServer) handle(path string, h http.HandlerFunc) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.routes[path] = h
}

// serveDoc serves doc as JSON at path.
func (d *docServer) serveDoc(path string, doc any) {
	b, _ := json.Marshal(doc)
	d.handle(path, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(b)
	})
}

func goodDoc(id string) map[string]any {
	return map[string]any{
		"client_id":                  id,
		"client_name":                "Example Agent",
		"client_uri":                 "https://agent.example",
		"redirect_uris":              []string{"http://127.0.0.1/callback", "https://agent.example/cb"},
		"token_endpoint_auth_method": "none",
		"grant_types":                []string{"authorization_code", "refresh_token"},
	}
}

func (d *docServer) source(e *rig) *clientreg.CIMDSource {
	return &clientreg.CIMDSource{Store: e.store, HTTPClient: d.srv.Client(), AllowHTTPLoopback: true}
}

func TestCIMDHappyPath(t *testing.T) {
	e := newRig(t)
	d := newDocServer(t)
	id := d.url("/agent/client.json")
	d.serveDoc("/agent/client.json", goodDoc(id))
	src := d.source(e)
	ctx := ctxT(t)

	c, err := src.Client(ctx, tenant, id)
	if err != nil {
		t.Fatal(err)
	}
	if c.ID != id || c.Kind != alpv1.ClientKind_CLIENT_KIND_PUBLIC_CIMD || c.RegisteredBy != identitystore.RegisteredByCIMD ||
		c.Name != "Example Agent" || c.Class() != alpv1.TrustClass_TRUST_CLASS_CONSUMER || len(c.RedirectURIs) != 2 {
		t.Errorf("client %+v", c)
	}
	stored, err := e.store.Client(tenant, id)
	if err != nil || stored.Kind != alpv1.ClientKind_CLIENT_KIND_PUBLIC_CIMD {
		t.Fatalf("stored %+v %v", stored, err)
	}
	// Cached: no second fetch.
	if _, err := src.Client(ctx, tenant, id); err != nil {
		t.Fatal(err)
	}
	if n := d.fetches.Load(); n != 1 {
		t.Errorf("%d fetches, want 1", n)
	}
	// Another tenant registers its own copy, from the cached document.
	if c, err := src.Client(ctx, other, id); err != nil || c.Tenant != other {
		t.Fatalf("other tenant: %+v %v", c, err)
	}
	if n := d.fetches.Load(); n != 1 {
		t.Errorf("%d fetches, want 1", n)
	}
	// Concurrent first uses share one fetch and register once.
	id2 := d.url("/agent2/client.json")
	d.serveDoc("/agent2/client.json", goodDoc(id2))
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for range 8 {
		wg.Go(func() {
			if _, err := src.Client(ctx, tenant, id2); err != nil {
				errs <- err
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if n := d.fetches.Load(); n != 2 {
		t.Errorf("%d fetches, want 2", n)
	}
}

func TestCIMDFallback(t *testing.T) {
	e := newRig(t)
	ctx := ctxT(t)
	if _, err := e.store.RegisterClient(ctx, identitystore.ClientSpec{Tenant: tenant, ClientID: "dcr_abc",
		Kind: alpv1.ClientKind_CLIENT_KIND_PUBLIC_DCR, RedirectURIs: []string{"https://a.example/cb"}}); err != nil {
		t.Fatal(err)
	}
	src := &clientreg.CIMDSource{Store: e.store}
	if c, err := src.Client(ctx, tenant, "dcr_abc"); err != nil || c.ID != "dcr_abc" {
		t.Fatalf("%+v %v", c, err)
	}
	if _, err := src.Client(ctx, tenant, "nope"); !errors.Is(err, identitystore.ErrNotFound) {
		t.Fatalf("unknown: %v", err)
	}
	if _, err := src.Client(ctx, "unhosted.example", "dcr_abc"); !errors.Is(err, identitystore.ErrNotHosted) {
		t.Fatalf("unhosted: %v", err)
	}
	// Next takes non-URL ids.
	var asked string
	src = &clientreg.CIMDSource{Store: e.store, Next: sourceFunc(func(_ context.Context, _, id string) (identitystore.Client, error) {
		asked = id
		return identitystore.Client{ID: id}, nil
	})}
	if c, err := src.Client(ctx, tenant, "vendor-app"); err != nil || c.ID != "vendor-app" || asked != "vendor-app" {
		t.Fatalf("%+v %v %q", c, err, asked)
	}
}

type sourceFunc func(ctx context.Context, tenant, id string) (identitystore.Client, error)

func (f sourceFunc) Client(ctx context.Context, tenant, id string) (identitystore.Client, error) {
	return f(ctx, tenant, id)
}

func TestCIMDAdminRegisteredURLNotFetched(t *testing.T) {
	e := newRig(t)
	ctx := ctxT(t)
	d := newDocServer(t)
	id := d.url("/vendor/client.json")
	p, err := e.store.BindPerson(ctx, tenant, "https://idp.example.org", "sub-admin", "admin@example.org", []string{"alp.admin"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.store.RegisterClient(ctx, identitystore.ClientSpec{Tenant: tenant, ClientID: id,
		Kind: alpv1.ClientKind_CLIENT_KIND_PUBLIC_VENDOR, RedirectURIs: []string{"https://vendor.example/cb"},
		RegisteredBy: p.ID, VendorAttestation: "vendor-approved"}); err != nil {
		t.Fatal(err)
	}
	c, err := d.source(e).Client(ctx, tenant, id)
	if err != nil || c.Kind != alpv1.ClientKind_CLIENT_KIND_PUBLIC_VENDOR || c.Class() != alpv1.TrustClass_TRUST_CLASS_COMPANY {
		t.Fatalf("%+v %v", c, err)
	}
	if n := d.fetches.Load(); n != 0 {
		t.Errorf("%d fetches", n)
	}
}

func TestCIMDChangedDocument(t *testing.T) {
	e := newRig(t)
	ctx := ctxT(t)
	d := newDocServer(t)
	id := d.url("/client.json")
	doc := goodDoc(id)
	d.serveDoc("/client.json", doc)
	src := d.source(e)
	src.CacheTTL = -1 // fetch every time
	if _, err := src.Client(ctx, tenant, id); err != nil {
		t.Fatal(err)
	}
	// A new name is ignored: the registration stays.
	doc["client_name"] = "Renamed"
	d.serveDoc("/client.json", doc)
	if c, err := src.Client(ctx, tenant, id); err != nil || c.Name != "Example Agent" {
		t.Fatalf("%+v %v", c, err)
	}
	// Same redirect URIs in another order: fine.
	doc["redirect_uris"] = []string{"https://agent.example/cb", "http://127.0.0.1/callback"}
	d.serveDoc("/client.json", doc)
	if _, err := src.Client(ctx, tenant, id); err != nil {
		t.Fatal(err)
	}
	// Changed redirect URIs: refused.
	doc["redirect_uris"] = []string{"https://attacker.example/cb"}
	d.serveDoc("/client.json", doc)
	_, err := src.Client(ctx, tenant, id)
	if !errors.Is(err, clientreg.ErrInvalidClientMetadata) || !strings.Contains(err.Error(), "redirect_uris changed") {
		t.Fatalf("changed redirect URIs: %v", err)
	}
	if n := d.fetches.Load(); n != 4 {
		t.Errorf("%d fetches, want 4", n)
	}
	// Unreachable later: fails closed.
	d.handle("/client.json", func(w http.ResponseWriter, r *http.Request) { http.Error(w, "down", http.StatusServiceUnavailable) })
	if _, err := src.Client(ctx, tenant, id); !errors.Is(err, clientreg.ErrClientUnreachable) {
		t.Fatalf("unreachable: %v", err)
	}
}

func TestCIMDRejections(t *testing.T) {
	e := newRig(t)
	d := newDocServer(t)
	jsonDoc := func(doc any) http.HandlerFunc {
		b, _ := json.Marshal(doc)
		return func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write(b)
		}
	}
	with := func(path string, edit func(map[string]any)) http.HandlerFunc {
		doc := goodDoc(d.url(path))
		edit(doc)
		return jsonDoc(doc)
	}
	cases := []struct {
		path    string
		handler http.HandlerFunc
		want    error
		msg     string
	}{
		{"/mismatch.json", with("/mismatch.json", func(m map[string]any) { m["client_id"] = "https://other.example/client.json" }), clientreg.ErrInvalidClientMetadata, "is not its URL"},
		{"/no-id.json", with("/no-id.json", func(m map[string]any) { delete(m, "client_id") }), clientreg.ErrInvalidClientMetadata, "is not its URL"},
		{"/redirect.json", func(w http.ResponseWriter, r *http.Request) {
			http.Redirect(w, r, d.url("/good.json"), http.StatusFound)
		}, clientreg.ErrClientUnreachable, "redirect"},
		{"/oversize.json", with("/oversize.json", func(m map[string]any) { m["padding"] = strings.Repeat("x", 20<<10) }), clientreg.ErrInvalidClientMetadata, "larger than"},
		{"/html.json", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/html")
			_, _ = w.Write([]byte("<html></html>"))
		}, clientreg.ErrInvalidClientMetadata, "Content-Type"},
		{"/notjson.json", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write([]byte("{not json"))
		}, clientreg.ErrInvalidClientMetadata, "not valid JSON"},
		{"/array.json", jsonDoc([]string{"x"}), clientreg.ErrInvalidClientMetadata, "JSON object"},
		{"/secret.json", with("/secret.json", func(m map[string]any) { m["client_secret"] = "s3cret" }), clientreg.ErrInvalidClientMetadata, "client_secret"},
		{"/confidential.json", with("/confidential.json", func(m map[string]any) { m["token_endpoint_auth_method"] = "client_secret_basic" }), clientreg.ErrInvalidClientMetadata, "organization admin"},
		{"/badredirect.json", with("/badredirect.json", func(m map[string]any) { m["redirect_uris"] = []string{"http://agent.example/cb"} }), clientreg.ErrInvalidClientMetadata, "loopback"},
		{"/noredirect.json", with("/noredirect.json", func(m map[string]any) { delete(m, "redirect_uris") }), clientreg.ErrInvalidClientMetadata, "at least one"},
		{"/missing.json", nil, clientreg.ErrClientUnreachable, "answered 404"},
		{"/slow.json", func(w http.ResponseWriter, r *http.Request) {
			select {
			case <-r.Context().Done():
			case <-time.After(5 * time.Second):
			}
		}, clientreg.ErrClientUnreachable, "no answer within"},
		{"/slowbody.json", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(200)
			_, _ = w.Write([]byte(`{"client_id":`))
			w.(http.Flusher).Flush()
			select {
			case <-r.Context().Done():
			case <-time.After(5 * time.Second):
			}
		}, clientreg.ErrClientUnreachable, "within"},
	}
	src := d.source(e)
	src.Timeout = 300 * time.Millisecond
	for _, tc := range cases {
		t.Run(strings.TrimPrefix(tc.path, "/"), func(t *testing.T) {
			if tc.handler != nil {
				d.handle(tc.path, tc.handler)
			}
			id := d.url(tc.path)
			start := time.Now()
			_, err := src.Client(ctxT(t), tenant, id)
			if !errors.Is(err, tc.want) || !strings.Contains(err.Error(), tc.msg) {
				t.Fatalf("got %v, want %v mentioning %q", err, tc.want, tc.msg)
			}
			if el := time.Since(start); el > 3*time.Second {
				t.Errorf("took %v", el)
			}
			if _, err := e.store.Client(tenant, id); !errors.Is(err, identitystore.ErrNotFound) {
				t.Errorf("registered anyway: %v", err)
			}
		})
	}
	// The redirect target was never fetched.
	d.serveDoc("/good.json", goodDoc(d.url("/good.json")))
}

func TestCIMDClientIDRules(t *testing.T) {
	e := newRig(t)
	d := newDocServer(t)
	src := d.source(e)
	strict := &clientreg.CIMDSource{Store: e.store, HTTPClient: d.srv.Client()}
	base := d.srv.URL
	cases := []struct {
		src *clientreg.CIMDSource
		id  string
		msg string
	}{
		{strict, "http://127.0.0.1:1/client.json", "must be https"},
		{src, "http://agent.example/client.json", "must be https"},
		{src, base + "/client.json#x", "fragment"},
		{src, base, "must have a path"},
		{src, base + "/", "must have a path"},
		{src, base + "/a/../client.json", "dot segments"},
		{src, base + "/a/%2e%2e/client.json", "dot segments"},
		{src, "https://user@agent.example/client.json", "user information"},
		{src, "HTTPS://agent.example/client.json", "lowercase"},
		{src, "https://agent.example/a b.json", "spaces"},
	}
	for _, tc := range cases {
		_, err := tc.src.Client(ctxT(t), tenant, tc.id)
		if !errors.Is(err, clientreg.ErrInvalidClientMetadata) || !strings.Contains(err.Error(), tc.msg) {
			t.Errorf("%s: %v, want ErrInvalidClientMetadata mentioning %q", tc.id, err, tc.msg)
		}
	}
	if n := d.fetches.Load(); n != 0 {
		t.Errorf("%d fetches", n)
	}
	if !clientreg.IsURLClientID("HTTPS://x") || clientreg.IsURLClientID("dcr_x") {
		t.Error("IsURLClientID")
	}
}

// TestCIMDHTTPLoopback: plain http on loopback is fetched with
// AllowHTTPLoopback, but identitystore registers https client ids only.
func TestCIMDHTTPLoopback(t *testing.T) {
	e := newRig(t)
	var fetched atomic.Bool
	var srv *httptest.Server
	srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fetched.Store(true)
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(goodDoc(srv.URL + "/client.json"))
	}))
	t.Cleanup(srv.Close)
	src := &clientreg.CIMDSource{Store: e.store, AllowHTTPLoopback: true}
	_, err := src.Client(ctxT(t), tenant, srv.URL+"/client.json")
	if !fetched.Load() || !errors.Is(err, clientreg.ErrInvalidClientMetadata) || !strings.Contains(err.Error(), "not registrable") {
		t.Fatalf("fetched %v, err %v", fetched.Load(), err)
	}
}

// staticResolver resolves every name to fixed addresses.
type staticResolver map[string][]string

func (r staticResolver) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	var out []netip.Addr
	for _, s := range r[host] {
		out = append(out, netip.MustParseAddr(s))
	}
	if len(out) == 0 {
		return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
	}
	return out, nil
}

func TestCIMDSSRFGuard(t *testing.T) {
	e := newRig(t)
	d := newDocServer(t)
	_, port, _ := net.SplitHostPort(d.srv.Listener.Addr().String())
	resolver := staticResolver{
		"agent.example":    {"127.0.0.1"},
		"intranet.example": {"10.1.2.3"},
		"metadata.example": {"169.254.169.254"},
		"mixed.example":    {"93.184.215.14", "192.168.1.1"},
		"mapped.example":   {"::ffff:127.0.0.1"},
	}
	for _, host := range []string{"agent.example", "localhost", "127.0.0.1", "[::1]", "intranet.example", "metadata.example", "mixed.example", "mapped.example"} {
		id := "https://" + net.JoinHostPort(strings.Trim(host, "[]"), port) + "/client.json"
		d.serveDoc("/client.json", goodDoc(id))
		src := &clientreg.CIMDSource{Store: e.store, HTTPClient: d.srv.Client(), Resolver: resolver, Timeout: 2 * time.Second}
		if host == "localhost" {
			src.Resolver = nil // the system resolver
		}
		_, err := src.Client(ctxT(t), tenant, id)
		if !errors.Is(err, clientreg.ErrClientUnreachable) || !errors.Is(err, clientreg.ErrAddressNotAllowed) {
			t.Errorf("%s: %v, want ErrAddressNotAllowed", host, err)
		}
	}
	if n := d.fetches.Load(); n != 0 {
		t.Errorf("%d fetches reached the server", n)
	}
	// With AllowHTTPLoopback, a name resolving to loopback is fetched (the
	// test certificate is valid for example.com).
	id := "https://example.com:" + port + "/client.json"
	d.serveDoc("/client.json", goodDoc(id))
	src := &clientreg.CIMDSource{Store: e.store, HTTPClient: d.srv.Client(), AllowHTTPLoopback: true,
		Resolver: staticResolver{"example.com": {"127.0.0.1"}}}
	if _, err := src.Client(ctxT(t), tenant, id); err != nil {
		t.Fatal(err)
	}
	// Private addresses stay refused even then.
	src = &clientreg.CIMDSource{Store: e.store, HTTPClient: d.srv.Client(), AllowHTTPLoopback: true,
		Resolver: staticResolver{"example.com": {"10.0.0.1"}}}
	if _, err := src.Client(ctxT(t), tenant, "https://example.com:"+port+"/other.json"); !errors.Is(err, clientreg.ErrAddressNotAllowed) {
		t.Fatalf("private with AllowHTTPLoopback: %v", err)
	}
	// Unknown names are unreachable.
	src = &clientreg.CIMDSource{Store: e.store, Resolver: resolver}
	if _, err := src.Client(ctxT(t), tenant, "https://nowhere.example/client.json"); !errors.Is(err, clientreg.ErrClientUnreachable) {
		t.Fatalf("unknown host: %v", err)
	}
}

type wrapTransport struct{ http.RoundTripper }

func TestCIMDTransportMustBeHTTPTransport(t *testing.T) {
	e := newRig(t)
	src := &clientreg.CIMDSource{Store: e.store, HTTPClient: &http.Client{Transport: wrapTransport{http.DefaultTransport}}}
	if _, err := src.Client(ctxT(t), tenant, "https://agent.example/client.json"); err == nil || !strings.Contains(err.Error(), "Transport") {
		t.Fatalf("%v", err)
	}
	if _, err := (&clientreg.CIMDSource{}).Client(ctxT(t), tenant, "x"); err == nil {
		t.Fatal("no store accepted")
	}
}

func TestPublicAddress(t *testing.T) {
	for s, want := range map[string]bool{
		"93.184.215.14": true, "2606:4700::1111": true, "8.8.8.8": true,
		"127.0.0.1": false, "::1": false, "10.0.0.1": false, "172.16.5.4": false, "192.168.0.1": false,
		"169.254.169.254": false, "fe80::1": false, "fc00::1": false, "0.0.0.0": false, "::": false,
		"100.64.0.1": false, "224.0.0.1": false, "255.255.255.255": false, "::ffff:10.0.0.1": false,
		"64:ff9b::a00:1": false, "2002:a00:1::": false, "198.18.0.1": false, "192.0.0.8": false,
	} {
		if got := clientreg.PublicAddress(netip.MustParseAddr(s)); got != want {
			t.Errorf("PublicAddress(%s) = %v", s, got)
		}
	}
}

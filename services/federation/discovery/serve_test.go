package discovery

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/tls"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"golang.org/x/mod/sumdb/tlog"

	alpv1 "github.com/alpd-project/alpd/gen/alp/v1"
	"github.com/alpd-project/alpd/internal/alp"
	"github.com/alpd-project/alpd/internal/alpwire"
	"github.com/alpd-project/alpd/internal/httpjson"
	"github.com/alpd-project/alpd/internal/keystore"
	"github.com/alpd-project/alpd/internal/ledgerlog"
)

const (
	testBroker    = "broker.a.example"
	testBrokerURL = "https://broker.a.example"
)

// pubRig is a Publisher for a.example and b.example on an HTTPS server
// (certificates for the domains and the broker name), and a Resolver
// pinned to it, sharing one clock.
type pubRig struct {
	ca  *testCA
	clk *clock
	ks  *keystore.MemoryStore
	pub *Publisher
	srv *server
	res *Resolver
}

func newPubRig(t *testing.T, pcfg PublisherConfig, rcfg Config) *pubRig {
	t.Helper()
	g := &pubRig{ca: newTestCA(t), clk: newClock()}
	g.ks = keystore.NewMemory(keystore.WithClock(g.clk.Now))
	pcfg.BrokerName, pcfg.BrokerURL, pcfg.Tenants, pcfg.Keys, pcfg.Now = testBroker, testBrokerURL, alp.Tenants{"a.example", "b.example"}, g.ks, g.clk.Now
	p, err := NewPublisher(pcfg)
	if err != nil {
		t.Fatal(err)
	}
	g.pub = p
	mux := http.NewServeMux()
	mux.HandleFunc("GET "+DomainDocPath, p.ServeDomainDoc)
	mux.HandleFunc("GET "+BrokerKeysPath, p.ServeBrokerKeys)
	g.srv = g.ca.serve(t, mux, "a.example", "b.example", "c.example", testBroker, "keys.a.example")
	pins := map[string]string{}
	for _, h := range []string{"a.example", "b.example", "c.example", testBroker, "keys.a.example"} {
		pins[h] = g.srv.addr()
	}
	rcfg.RootCAs, rcfg.Now, rcfg.Resolve = g.ca.pool, g.clk.Now, pins
	g.res = mustResolver(t, rcfg)
	return g
}

// get GETs path from the server with the given Host.
func (g *pubRig) get(t *testing.T, host, path string) (*http.Response, []byte) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, g.srv.URL+path, nil)
	req.Host = host
	c := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: g.ca.pool, ServerName: "a.example"}}}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, b
}

func (g *pubRig) active(t *testing.T) keystore.KeyInfo {
	t.Helper()
	k, err := g.ks.Active(context.Background(), testBroker, alpv1.KeyPurpose_KEY_PURPOSE_FEDERATION)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func TestServedDocumentsRoundTrip(t *testing.T) {
	g := newPubRig(t, PublisherConfig{}, Config{})
	ctx := context.Background()
	ledgerKey, err := g.ks.Generate(ctx, "a.example", alpv1.KeyPurpose_KEY_PURPOSE_LEDGER)
	if err != nil {
		t.Fatal(err)
	}

	doc, err := g.res.HomeBroker(ctx, "a.example")
	if err != nil {
		t.Fatal(err)
	}
	if want := (alpwire.DomainDoc{Wire: alpwire.Version, Domain: "a.example", Broker: testBroker, BrokerURL: testBrokerURL, MaxAge: 86400}); doc != want {
		t.Fatalf("DomainDoc %+v, want %+v", doc, want)
	}
	bk, err := g.res.BrokerKeys(ctx, doc.BrokerURL, doc.Broker)
	if err != nil {
		t.Fatal(err)
	}
	// The federation key was made on first use, and is the one signing.
	k := g.active(t)
	id := alpwire.KeyID(k.PublicKey)
	if len(bk.VerifyKeys) != 1 || bk.VerifyKeys[id].ValidFromTS != k.Created.UnixMilli() {
		t.Fatalf("verify_keys %+v, want only %s", bk.VerifyKeys, id)
	}
	if _, ok := bk.Signatures[testBroker][id]; !ok {
		t.Fatalf("signatures %v, want one by %s", bk.Signatures, id)
	}
	if bk.FederationURL != testBrokerURL+"/federation/v1" {
		t.Fatalf("federation_url %q", bk.FederationURL)
	}
	if got := bk.ValidUntilTS; got != g.clk.Now().Add(24*time.Hour).UnixMilli() {
		t.Fatalf("valid_until_ts %d", got)
	}

	// ledger_keys are the ledger's own checkpoint verifier keys: a
	// checkpoint the ledger's note signer signs opens with them.
	vkeys := bk.LedgerKeys["a.example"]
	if len(vkeys) != 1 || len(bk.LedgerKeys["b.example"]) != 0 {
		t.Fatalf("ledger_keys %v", bk.LedgerKeys)
	}
	signer, err := g.ks.Signer(ctx, "a.example", alpv1.KeyPurpose_KEY_PURPOSE_LEDGER, ledgerKey.KeyID)
	if err != nil {
		t.Fatal(err)
	}
	ns, err := ledgerlog.NoteSigner("a.example", signer)
	if err != nil {
		t.Fatal(err)
	}
	origin := ledgerlog.Origin("a.example", "p1")
	signed, err := ledgerlog.SignCheckpoint(ledgerlog.Checkpoint{Origin: origin, Size: 1, Root: tlog.Hash{1}}, ns)
	if err != nil {
		t.Fatal(err)
	}
	verifiers, err := ledgerlog.Verifiers(vkeys...)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ledgerlog.OpenCheckpoint(signed, origin, verifiers); err != nil {
		t.Fatalf("a checkpoint does not open with the published ledger keys: %v", err)
	}

	// The exact served bytes: cacheable, parsed and verified by alpwire; a
	// changed byte fails the self-signature.
	resp, raw := g.get(t, testBroker, BrokerKeysPath)
	if cc := resp.Header.Get("Cache-Control"); cc != "public, max-age=3600" {
		t.Fatalf("Cache-Control %q", cc)
	}
	if _, err := alpwire.ParseBrokerKeys(raw); err != nil {
		t.Fatal(err)
	}
	tampered := bytes.Replace(raw, []byte(`"valid_until_ts":1`), []byte(`"valid_until_ts":2`), 1)
	if bytes.Equal(tampered, raw) {
		t.Fatal("test did not tamper")
	}
	if _, err := alpwire.ParseBrokerKeys(tampered); alpwire.CodeOf(err) != alpwire.CodeBadSignature {
		t.Fatalf("tampered keys: %v", err)
	}
	resp, raw = g.get(t, "a.example", DomainDocPath)
	if cc := resp.Header.Get("Cache-Control"); cc != "public, max-age=86400" {
		t.Fatalf("Cache-Control %q", cc)
	}
	if _, err := alpwire.ParseDomainDoc(raw); err != nil {
		t.Fatal(err)
	}
}

func TestDomainDocByHost(t *testing.T) {
	g := newPubRig(t, PublisherConfig{}, Config{})
	for _, host := range []string{"b.example", "B.Example:8443", "b.example."} {
		resp, raw := g.get(t, host, DomainDocPath)
		d, err := alpwire.ParseDomainDoc(raw)
		if resp.StatusCode != http.StatusOK || err != nil || d.Domain != "b.example" {
			t.Fatalf("Host %s: %d %s %v", host, resp.StatusCode, raw, err)
		}
	}
	for _, host := range []string{"c.example", testBroker, "127.0.0.1"} {
		resp, raw := g.get(t, host, DomainDocPath)
		var p httpjson.Problem
		if err := json.Unmarshal(raw, &p); err != nil || resp.StatusCode != http.StatusNotFound || p.Code != CodeUnknownDomain {
			t.Fatalf("Host %s: %d %s", host, resp.StatusCode, raw)
		}
	}
	// The Resolver sees the same: c.example is not hosted there.
	_, err := g.res.HomeBroker(context.Background(), "c.example")
	wantCode(t, err, CodeUnreachable)
}

func TestBrokerKeysChecks(t *testing.T) {
	g := newPubRig(t, PublisherConfig{}, Config{})
	ctx := context.Background()
	// The keys must be of the broker asked, at the URL asked.
	_, err := g.res.BrokerKeys(ctx, testBrokerURL, "broker.b.example")
	wantCode(t, err, CodeInvalid)
	_, err = g.res.BrokerKeys(ctx, "https://keys.a.example", testBroker)
	wantCode(t, err, CodeInvalid)
	_, err = g.res.BrokerKeys(ctx, testBrokerURL, testBroker)
	if err != nil {
		t.Fatal(err)
	}
}

func TestBrokerKeysSelfSignatureChecked(t *testing.T) {
	ca, clk := newTestCA(t), newClock()
	ks := keystore.NewMemory(keystore.WithClock(clk.Now))
	p, err := NewPublisher(PublisherConfig{BrokerName: testBroker, BrokerURL: testBrokerURL, Tenants: alp.Tenants{"a.example"}, Keys: ks, Now: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	raw, err := p.SignedBrokerKeys(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	bad := bytes.Replace(raw, []byte(`"valid_until_ts":`), []byte(`"valid_until_ts":9`), 1)
	s := ca.serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = w.Write(bad) }), testBroker)
	r := mustResolver(t, pinnedConfig(ca, clk, map[string]string{testBroker: s.addr()}))
	_, err = r.BrokerKeys(context.Background(), testBrokerURL, testBroker)
	wantCode(t, err, CodeInvalid)
	if alpwire.CodeOf(err) != alpwire.CodeBadSignature {
		t.Fatalf("cause %v, want alpwire's bad_signature", err)
	}
}

func TestBrokerKeysCacheRules(t *testing.T) {
	cases := []struct {
		name     string
		validity time.Duration // the publisher's valid_until_ts - now
		maxAge   time.Duration // its Cache-Control
		cap      time.Duration // the resolver's MaxMaxAge
		ttl      time.Duration
	}{
		{"until valid_until_ts", time.Hour, 100 * time.Hour, 0, time.Hour},
		{"Cache-Control shorter", 24 * time.Hour, 10 * time.Minute, 0, 10 * time.Minute},
		{"capped at MaxMaxAge 48h", 30 * 24 * time.Hour, 30 * 24 * time.Hour, 0, 48 * time.Hour},
		{"never past 7 days", 30 * 24 * time.Hour, 30 * 24 * time.Hour, 30 * 24 * time.Hour, 7 * 24 * time.Hour},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			g := newPubRig(t, PublisherConfig{KeysValidity: c.validity, KeysMaxAge: c.maxAge}, Config{MaxMaxAge: c.cap})
			ctx := context.Background()
			fetch := func() {
				t.Helper()
				if _, err := g.res.BrokerKeys(ctx, testBrokerURL, testBroker); err != nil {
					t.Fatal(err)
				}
			}
			fetch()
			g.clk.Advance(c.ttl - time.Second)
			fetch()
			if n := g.srv.hits.Load(); n != 1 {
				t.Fatalf("%d fetches within %v", n, c.ttl)
			}
			g.clk.Advance(2 * time.Second)
			fetch()
			if n := g.srv.hits.Load(); n != 2 {
				t.Fatalf("%d fetches after %v, want 2", n, c.ttl)
			}
		})
	}
}

func TestRotationAndRevocation(t *testing.T) {
	g := newPubRig(t, PublisherConfig{}, Config{RefreshInterval: time.Minute})
	ctx := context.Background()
	keysAt := g.res.KeyResolver(ctx, testBrokerURL)
	fetches := func() int64 { return g.srv.hits.Load() }

	k1, err := BrokerKey(ctx, g.ks, testBroker)
	if err != nil {
		t.Fatal(err)
	}
	id1 := alpwire.KeyID(k1.PublicKey)
	pub, err := keysAt(testBroker, id1, g.clk.Now())
	if err != nil || !ed25519.PublicKey(k1.PublicKey).Equal(pub) {
		t.Fatalf("current key: %v", err)
	}

	// Rotate: k1 becomes old, valid until k2 was made.
	g.clk.Advance(10 * time.Minute)
	k2, err := g.ks.Rotate(ctx, testBroker, alpv1.KeyPurpose_KEY_PURPOSE_FEDERATION)
	if err != nil {
		t.Fatal(err)
	}
	id2 := alpwire.KeyID(k2.PublicKey)
	// The cached keys (fetched 10 min ago) do not hold k2: one refresh.
	n := fetches()
	if _, err := keysAt(testBroker, id2, g.clk.Now()); err != nil {
		t.Fatalf("new key after rotation: %v", err)
	}
	if fetches() != n+1 {
		t.Fatalf("the unknown key made %d fetches, want 1", fetches()-n)
	}
	bk, err := g.res.BrokerKeys(ctx, testBrokerURL, testBroker)
	if err != nil {
		t.Fatal(err)
	}
	old, ok := bk.OldVerifyKeys[id1]
	if !ok || old.ExpiredTS != k2.Created.UnixMilli() || old.ValidFromTS != k1.Created.UnixMilli() || len(bk.VerifyKeys) != 1 {
		t.Fatalf("after rotation: verify %v old %v", bk.VerifyKeys, bk.OldVerifyKeys)
	}
	if _, err := keysAt(testBroker, id1, k2.Created.Add(-time.Millisecond)); err != nil {
		t.Fatalf("old key for something made before its expiry: %v", err)
	}
	if _, err := keysAt(testBroker, id1, g.clk.Now()); alpwire.CodeOf(err) != alpwire.CodeKeyExpired {
		t.Fatalf("old key for a new request: %v, want key_expired", err)
	}

	// An unknown key within the refresh interval: no second fetch.
	n = fetches()
	if _, err := keysAt(testBroker, "ed25519:nosuchkey", g.clk.Now()); alpwire.CodeOf(err) != alpwire.CodeUnknownKey {
		t.Fatalf("unknown key: %v", err)
	}
	if fetches() != n {
		t.Fatal("Refresh fetched again within RefreshInterval")
	}

	// Revoke k2 as compromised 5 min ago: a new key is made when the keys
	// are next served, and k2 voids everything from then on.
	g.clk.Advance(10 * time.Minute)
	compromised := g.clk.Now().Add(-5 * time.Minute).Truncate(time.Millisecond)
	if err := g.ks.Revoke(ctx, testBroker, alpv1.KeyPurpose_KEY_PURPOSE_FEDERATION, k2.KeyID, compromised); err != nil {
		t.Fatal(err)
	}
	if _, err := g.res.Refresh(ctx, testBroker); err != nil {
		t.Fatal(err)
	}
	bk, err = g.res.BrokerKeys(ctx, testBrokerURL, testBroker)
	if err != nil {
		t.Fatal(err)
	}
	k3 := g.active(t)
	rev, ok := bk.RevokedKeys[id2]
	if !ok || rev.CompromisedTS != compromised.UnixMilli() {
		t.Fatalf("revoked_keys %v, want %s since %v", bk.RevokedKeys, id2, compromised)
	}
	if _, ok := bk.VerifyKeys[alpwire.KeyID(k3.PublicKey)]; !ok || len(bk.VerifyKeys) != 1 {
		t.Fatalf("verify_keys %v, want the new key only", bk.VerifyKeys)
	}
	if _, ok := bk.OldVerifyKeys[id1]; !ok {
		t.Fatal("the old key vanished on revocation of its successor")
	}
	if _, err := keysAt(testBroker, id2, compromised); alpwire.CodeOf(err) != alpwire.CodeKeyRevoked {
		t.Fatalf("revoked key at its compromise time: %v", err)
	}
	if _, err := keysAt(testBroker, id2, compromised.Add(-time.Millisecond)); err != nil {
		t.Fatalf("revoked key before its compromise: %v", err)
	}
	// Served as such, and verifiable end to end by alpwire through the
	// resolver: a signature by the revoked key on a new object fails.
	raw, err := g.pub.SignedBrokerKeys(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := alpwire.VerifySigned(raw, alpwire.CtxBrokerKeys, testBroker, keysAt, g.clk.Now()); err != nil {
		t.Fatalf("VerifySigned through the KeyResolver: %v", err)
	}
	if !strings.Contains(string(raw), `"revoked_keys"`) {
		t.Fatal("no revoked_keys served")
	}
}

func TestNewPublisherChecks(t *testing.T) {
	ks := keystore.NewMemory()
	for name, cfg := range map[string]PublisherConfig{
		"bad broker name": {BrokerName: "Broker!", BrokerURL: testBrokerURL, Keys: ks},
		"plain http":      {BrokerName: testBroker, BrokerURL: "http://broker.a.example", Keys: ks},
		"no keystore":     {BrokerName: testBroker, BrokerURL: testBrokerURL},
		"bad tenant":      {BrokerName: testBroker, BrokerURL: testBrokerURL, Keys: ks, Tenants: alp.Tenants{"A.example"}},
	} {
		if _, err := NewPublisher(cfg); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	if _, err := NewPublisher(PublisherConfig{BrokerName: testBroker, BrokerURL: "http://127.0.0.1:8080/", Keys: ks}); err != nil {
		t.Errorf("loopback plain http: %v", err)
	}
}

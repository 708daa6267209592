package accesstoken

import (
	"context"
	"crypto"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/alpd-project/alpd/internal/keystore"
)

const (
	tenantA  = "acme.example"
	tenantB  = "globex.example"
	tenantC  = "initech.example" // has keys, but no verifier accepts it
	issuerA  = "https://broker.example/t/acme"
	issuerB  = "https://broker.example/t/globex"
	resource = "https://broker.example/mcp"
)

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// clock is a settable test clock.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) Now() time.Time      { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) Set(t time.Time)     { c.mu.Lock(); c.t = t; c.mu.Unlock() }
func (c *clock) Add(d time.Duration) { c.mu.Lock(); c.t = c.t.Add(d); c.mu.Unlock() }

// fakeRevocations: grants revoked with a reason; persons revoked at an
// instant (tokens issued at or before it are void); Fresh fails with stale.
type fakeRevocations struct {
	mu           sync.Mutex
	stale        error
	grants       map[string]string
	persons      map[string]time.Time
	gotStaleness time.Duration
	gotIssuedAt  time.Time
	revokedCalls int
}

func newFakeRevocations() *fakeRevocations {
	return &fakeRevocations{grants: map[string]string{}, persons: map[string]time.Time{}}
}

func (f *fakeRevocations) Revoked(tenant, person, grant string, issuedAt time.Time) (bool, string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.revokedCalls++
	f.gotIssuedAt = issuedAt
	if reason, ok := f.grants[tenant+"/"+grant]; ok {
		return true, reason
	}
	if at, ok := f.persons[tenant+"/"+person]; ok && !issuedAt.After(at) {
		return true, "person signed out everywhere"
	}
	return false, ""
}

func (f *fakeRevocations) Fresh(maxStaleness time.Duration) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.gotStaleness = maxStaleness
	return f.stale
}

type rig struct {
	ks    *keystore.MemoryStore
	clock *clock
	rev   *fakeRevocations
	iss   *Issuer
	ver   *Verifier
	keyA  keystore.KeyInfo
	keyB  keystore.KeyInfo
	keyC  keystore.KeyInfo
}

func newRig(t testing.TB) *rig {
	t.Helper()
	ctx := context.Background()
	e := &rig{ks: keystore.NewMemory(), clock: &clock{t: t0}, rev: newFakeRevocations()}
	var err error
	for _, k := range []struct {
		tenant string
		dst    *keystore.KeyInfo
	}{{tenantA, &e.keyA}, {tenantB, &e.keyB}, {tenantC, &e.keyC}} {
		if *k.dst, err = e.ks.Generate(ctx, k.tenant, Purpose); err != nil {
			t.Fatalf("Generate(%s): %v", k.tenant, err)
		}
	}
	e.iss = &Issuer{
		Keys:    e.ks,
		Issuers: map[string]string{tenantA: issuerA, tenantB: issuerB, tenantC: "https://broker.example/t/initech"},
		Now:     e.clock.Now,
	}
	e.ver = &Verifier{
		Keys:        FromKeyStore(e.ks),
		Resource:    resource,
		Issuers:     map[string]string{tenantA: issuerA, tenantB: issuerB},
		Revocations: e.rev,
		Now:         e.clock.Now,
	}
	return e
}

func baseClaims() Claims {
	return Claims{
		Subject:  "person-7f3a",
		Audience: resource,
		Tenant:   tenantA,
		ClientID: "https://agent.example/client.json",
		AgentID:  "agent-42",
		GrantID:  "grant-9",
		Class:    ClassCompany,
		Scopes:   []string{"alp.read", "alp.send"},
	}
}

func (e *rig) mint(t testing.TB, c Claims) string {
	t.Helper()
	tok, err := e.iss.Mint(context.Background(), c)
	if err != nil {
		t.Fatalf("Mint: %v", err)
	}
	return tok
}

// payload is the claims of a valid token of tenant A issued now, as a map
// that tests can change before forging.
func (e *rig) payload() map[string]any {
	now := e.clock.Now().Unix()
	return map[string]any{
		"iss": issuerA, "sub": "person-7f3a", "aud": resource,
		"exp": now + 300, "iat": now, "jti": "jti-1",
		"client_id": "client-1", "scope": "alp.read",
		"tenant": tenantA, "agent": "agent-42", "grant": "grant-9", "class": ClassConsumer,
	}
}

func edHeader(kid string) map[string]any {
	return map[string]any{"alg": "EdDSA", "typ": "at+jwt", "kid": kid}
}

// signer returns a function signing with the key store's signer for the
// key, the way a forger holding the key (or a buggy issuer) would.
func (e *rig) signer(t testing.TB, tenant string, key keystore.KeyInfo) func([]byte) []byte {
	t.Helper()
	s, err := e.ks.Signer(context.Background(), tenant, Purpose, key.KeyID)
	if err != nil {
		t.Fatalf("Signer: %v", err)
	}
	return func(input []byte) []byte {
		sig, err := s.Sign(rand.Reader, input, crypto.Hash(0))
		if err != nil {
			t.Fatalf("Sign: %v", err)
		}
		return sig
	}
}

// forge builds a compact JWS by hand.
func forge(t testing.TB, header, claims map[string]any, sign func([]byte) []byte) string {
	t.Helper()
	hb, err := json.Marshal(header)
	if err != nil {
		t.Fatal(err)
	}
	cb, err := json.Marshal(claims)
	if err != nil {
		t.Fatal(err)
	}
	input := b64(hb) + "." + b64(cb)
	var sig []byte
	if sign != nil {
		sig = sign([]byte(input))
	}
	return input + "." + b64(sig)
}

func b64(b []byte) string { return base64.RawURLEncoding.EncodeToString(b) }

func decodeSegment(t testing.TB, seg string) map[string]any {
	t.Helper()
	b, err := base64.RawURLEncoding.DecodeString(seg)
	if err != nil {
		t.Fatalf("decode segment: %v", err)
	}
	m := map[string]any{}
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatalf("unmarshal segment: %v", err)
	}
	return m
}

// assertNoLeak fails if err's text holds the token or any sizeable part.
func assertNoLeak(t testing.TB, err error, token string) {
	t.Helper()
	if err == nil || token == "" {
		return
	}
	msg := err.Error()
	if strings.Contains(msg, token) {
		t.Fatalf("error text contains the token: %q", msg)
	}
	for _, seg := range strings.Split(token, ".") {
		if len(seg) >= 8 && strings.Contains(msg, seg) {
			t.Fatalf("error text contains a token segment: %q", msg)
		}
	}
	if e, ok := err.(*Error); ok {
		if h := e.WWWAuthenticate("https://broker.example/.well-known/oauth-protected-resource/mcp"); strings.Contains(h, token) {
			t.Fatalf("challenge contains the token: %q", h)
		}
	}
}

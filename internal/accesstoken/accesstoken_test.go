package accesstoken

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/hmac"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	alpv1 "github.com/alpd-project/alpd/gen/alp/v1"
	"github.com/alpd-project/alpd/internal/keystore"
)

func TestRoundTrip(t *testing.T) {
	e := newRig(t)
	c := baseClaims()
	tok := e.mint(t, c)

	parts := strings.Split(tok, ".")
	if len(parts) != 3 {
		t.Fatalf("token has %d parts", len(parts))
	}
	h := decodeSegment(t, parts[0])
	if want := map[string]any{"alg": "EdDSA", "typ": "at+jwt", "kid": e.keyA.KeyID}; !reflect.DeepEqual(h, want) {
		t.Errorf("header = %v, want %v", h, want)
	}
	p := decodeSegment(t, parts[1])
	wantKeys := []string{"aud", "agent", "class", "client_id", "exp", "grant", "iat", "iss", "jti", "scope", "sub", "tenant"}
	var gotKeys []string
	for k := range p {
		gotKeys = append(gotKeys, k)
	}
	slices.Sort(gotKeys)
	slices.Sort(wantKeys)
	if !slices.Equal(gotKeys, wantKeys) {
		t.Errorf("claim names = %v, want %v", gotKeys, wantKeys)
	}
	if p["aud"] != resource || p["scope"] != "alp.read alp.send" || p["iss"] != issuerA {
		t.Errorf("claims = %v", p)
	}
	if p["exp"].(float64)-p["iat"].(float64) != 600 {
		t.Errorf("lifetime = %v s, want 600", p["exp"].(float64)-p["iat"].(float64))
	}

	e.clock.Add(9 * time.Minute)
	got, err := e.ver.Verify(context.Background(), tok)
	if err != nil {
		t.Fatalf("Verify: %v", err)
	}
	want := c
	want.Issuer = issuerA
	want.IssuedAt = t0
	want.Expiry = t0.Add(MaxLifetime)
	want.ID = got.ID
	if got.ID == "" || len(got.ID) < 20 {
		t.Errorf("jti = %q, want a random id", got.ID)
	}
	if !got.IssuedAt.Equal(want.IssuedAt) || !got.Expiry.Equal(want.Expiry) {
		t.Errorf("times = %v..%v, want %v..%v", got.IssuedAt, got.Expiry, want.IssuedAt, want.Expiry)
	}
	got.IssuedAt, got.Expiry, want.IssuedAt, want.Expiry = time.Time{}, time.Time{}, time.Time{}, time.Time{}
	if !reflect.DeepEqual(*got, want) {
		t.Errorf("claims:\n got %+v\nwant %+v", *got, want)
	}
	if e.rev.gotStaleness != DefaultMaxStaleness {
		t.Errorf("Fresh got %v, want %v", e.rev.gotStaleness, DefaultMaxStaleness)
	}
	if !e.rev.gotIssuedAt.Equal(t0) {
		t.Errorf("Revoked got issuedAt %v, want %v", e.rev.gotIssuedAt, t0)
	}

	// Second token: other tenant, consumer class, no scopes, explicit fields.
	c2 := baseClaims()
	c2.Tenant, c2.Class, c2.Scopes, c2.ID = tenantB, ClassConsumer, nil, "my-jti"
	c2.IssuedAt = e.clock.Now().Add(-time.Minute)
	c2.Expiry = c2.IssuedAt.Add(2 * time.Minute)
	tok2 := e.mint(t, c2)
	if p := decodeSegment(t, strings.Split(tok2, ".")[1]); p["scope"] != nil {
		t.Errorf("empty scope should be omitted, got %v", p["scope"])
	}
	got2, err := e.ver.Verify(context.Background(), tok2)
	if err != nil {
		t.Fatalf("Verify tenant B: %v", err)
	}
	if got2.Tenant != tenantB || got2.Issuer != issuerB || got2.Class != ClassConsumer || got2.Scopes != nil || got2.ID != "my-jti" || !got2.Expiry.Equal(c2.Expiry.Truncate(time.Second)) {
		t.Errorf("claims = %+v", got2)
	}
}

func TestMintJTIUnique(t *testing.T) {
	e := newRig(t)
	seen := map[string]bool{}
	for range 50 {
		c, err := e.ver.Verify(context.Background(), e.mint(t, baseClaims()))
		if err != nil {
			t.Fatal(err)
		}
		if seen[c.ID] {
			t.Fatalf("jti %q repeated", c.ID)
		}
		seen[c.ID] = true
	}
}

func TestMintMaxLifetime(t *testing.T) {
	e := newRig(t)
	e.iss.MaxLifetime = 5 * time.Minute
	c, err := e.ver.Verify(context.Background(), e.mint(t, baseClaims()))
	if err != nil {
		t.Fatal(err)
	}
	if d := c.Expiry.Sub(c.IssuedAt); d != 5*time.Minute {
		t.Errorf("default lifetime = %v, want 5m", d)
	}
	bc := baseClaims()
	bc.Expiry = t0.Add(6 * time.Minute)
	if _, err := e.iss.Mint(context.Background(), bc); !errors.Is(err, ErrLifetime) {
		t.Errorf("6m with MaxLifetime 5m: err = %v, want ErrLifetime", err)
	}
}

func TestMintRefuses(t *testing.T) {
	ctx := context.Background()
	tests := []struct {
		name   string
		setup  func(*rig)
		change func(*Claims)
		is     error
	}{
		{"lifetime over 10 minutes", nil, func(c *Claims) { c.Expiry = t0.Add(MaxLifetime + time.Second) }, ErrLifetime},
		{"lifetime over 10 minutes with past iat", nil, func(c *Claims) { c.IssuedAt = t0.Add(-time.Hour); c.Expiry = t0.Add(time.Minute) }, ErrLifetime},
		{"expiry before iat", nil, func(c *Claims) { c.IssuedAt = t0.Add(-time.Minute); c.Expiry = t0.Add(-2 * time.Minute) }, ErrLifetime},
		{"MaxLifetime over cap", func(e *rig) { e.iss.MaxLifetime = 11 * time.Minute }, nil, ErrMisconfigured},
		{"no key store", func(e *rig) { e.iss.Keys = nil }, nil, ErrMisconfigured},
		{"tenant without issuer", nil, func(c *Claims) { c.Tenant = "unknown.example" }, ErrMisconfigured},
		{"issuer mismatch", nil, func(c *Claims) { c.Issuer = "https://evil.example" }, nil},
		{"no subject", nil, func(c *Claims) { c.Subject = "" }, nil},
		{"no audience", nil, func(c *Claims) { c.Audience = "" }, nil},
		{"two audiences", nil, func(c *Claims) { c.Audience = resource + " https://other.example" }, nil},
		{"no client", nil, func(c *Claims) { c.ClientID = "" }, nil},
		{"no agent", nil, func(c *Claims) { c.AgentID = "" }, nil},
		{"no grant", nil, func(c *Claims) { c.GrantID = "" }, nil},
		{"bad class", nil, func(c *Claims) { c.Class = "admin" }, nil},
		{"empty class", nil, func(c *Claims) { c.Class = "" }, nil},
		{"scope with space", nil, func(c *Claims) { c.Scopes = []string{"alp.read alp.admin"} }, nil},
		{"empty scope", nil, func(c *Claims) { c.Scopes = []string{""} }, nil},
		{"scope with quote", nil, func(c *Claims) { c.Scopes = []string{`a"b`} }, nil},
		{"iat in the future", nil, func(c *Claims) { c.IssuedAt = t0.Add(time.Minute) }, nil},
		{"expired already", nil, func(c *Claims) { c.IssuedAt = t0.Add(-5 * time.Minute); c.Expiry = t0 }, nil},
		{"no active key", func(e *rig) {
			_ = e.ks.Revoke(ctx, tenantA, Purpose, e.keyA.KeyID, time.Time{})
		}, nil, keystore.ErrNoActiveKey},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newRig(t)
			if tt.setup != nil {
				tt.setup(e)
			}
			c := baseClaims()
			if tt.change != nil {
				tt.change(&c)
			}
			tok, err := e.iss.Mint(ctx, c)
			if err == nil {
				t.Fatalf("Mint succeeded: %s", tok)
			}
			if tt.is != nil && !errors.Is(err, tt.is) {
				t.Errorf("err = %v, want %v", err, tt.is)
			}
		})
	}
}

// racingStore rotates the key right after Active answered, so the first
// signer Mint makes refuses.
type racingStore struct {
	keystore.KeyStore
	once sync.Once
}

func (r *racingStore) Active(ctx context.Context, tenant string, p alpv1.KeyPurpose) (keystore.KeyInfo, error) {
	info, err := r.KeyStore.Active(ctx, tenant, p)
	r.once.Do(func() { _, _ = r.KeyStore.Rotate(ctx, tenant, p) })
	return info, err
}

func TestMintRetriesAfterRotation(t *testing.T) {
	e := newRig(t)
	e.iss.Keys = &racingStore{KeyStore: e.ks}
	tok := e.mint(t, baseClaims())
	active, err := e.ks.Active(context.Background(), tenantA, Purpose)
	if err != nil {
		t.Fatal(err)
	}
	if kid := decodeSegment(t, strings.Split(tok, ".")[0])["kid"]; kid != active.KeyID || kid == e.keyA.KeyID {
		t.Errorf("kid = %v, want the new active key %s", kid, active.KeyID)
	}
	if _, err := e.ver.Verify(context.Background(), tok); err != nil {
		t.Fatal(err)
	}
}

// failingKeys fails every lookup.
type failingKeys struct{}

func (failingKeys) PublicKeys(context.Context, string) ([]keystore.KeyInfo, error) {
	return nil, errors.New("store down")
}

func TestVerifyRejects(t *testing.T) {
	ctx := context.Background()
	type tc struct {
		name  string
		token func(t *testing.T, e *rig) string
		is    error
		code  string
		desc  string // substring of the description, if set
	}
	withPayload := func(change func(e *rig, p map[string]any)) func(*testing.T, *rig) string {
		return func(t *testing.T, e *rig) string {
			p := e.payload()
			change(e, p)
			return forge(t, edHeader(e.keyA.KeyID), p, e.signer(t, tenantA, e.keyA))
		}
	}
	withHeader := func(change func(h map[string]any)) func(*testing.T, *rig) string {
		return func(t *testing.T, e *rig) string {
			h := edHeader(e.keyA.KeyID)
			change(h)
			return forge(t, h, e.payload(), e.signer(t, tenantA, e.keyA))
		}
	}
	minted := func(change func(*Claims), after func(*rig)) func(*testing.T, *rig) string {
		return func(t *testing.T, e *rig) string {
			c := baseClaims()
			if change != nil {
				change(&c)
			}
			tok := e.mint(t, c)
			if after != nil {
				after(e)
			}
			return tok
		}
	}

	tests := []tc{
		// Form.
		{name: "empty", token: func(*testing.T, *rig) string { return "" }, is: ErrMalformed},
		{name: "garbage", token: func(*testing.T, *rig) string { return "not-a-token" }, is: ErrMalformed},
		{name: "two parts", token: func(*testing.T, *rig) string { return "eyJhbGciOiJFZERTQSJ9.e30" }, is: ErrMalformed},
		{name: "bad base64", token: func(*testing.T, *rig) string { return "!!!.@@@.###" }, is: ErrMalformed},
		{name: "too long", token: func(*testing.T, *rig) string { return strings.Repeat("a", MaxTokenLength+1) }, is: ErrMalformed},
		{name: "JSON serialization", token: func(t *testing.T, e *rig) string {
			return `{"payload":"e30","protected":"eyJhbGciOiJFZERTQSJ9","signature":"AA"}`
		}, is: ErrMalformed},
		{name: "payload not JSON", token: func(t *testing.T, e *rig) string {
			h, _ := jsonB64(edHeader(e.keyA.KeyID))
			input := h + "." + b64([]byte("not json"))
			return input + "." + b64(e.signer(t, tenantA, e.keyA)([]byte(input)))
		}, is: ErrMalformed},

		// Algorithms.
		{name: "alg none", token: func(t *testing.T, e *rig) string {
			return forge(t, map[string]any{"alg": "none", "typ": "at+jwt", "kid": e.keyA.KeyID}, e.payload(), nil)
		}, is: ErrBadAlgorithm},
		{name: "alg HS256 keyed with the public key", token: func(t *testing.T, e *rig) string {
			return forge(t, map[string]any{"alg": "HS256", "typ": "at+jwt", "kid": e.keyA.KeyID}, e.payload(), func(in []byte) []byte {
				m := hmac.New(sha256.New, e.keyA.PublicKey)
				m.Write(in)
				return m.Sum(nil)
			})
		}, is: ErrBadAlgorithm},
		{name: "alg RS256", token: func(t *testing.T, e *rig) string {
			k, err := rsa.GenerateKey(rand.Reader, 2048)
			if err != nil {
				t.Fatal(err)
			}
			return forge(t, map[string]any{"alg": "RS256", "typ": "at+jwt", "kid": e.keyA.KeyID}, e.payload(), func(in []byte) []byte {
				d := sha256.Sum256(in)
				sig, err := rsa.SignPKCS1v15(rand.Reader, k, crypto.SHA256, d[:])
				if err != nil {
					t.Fatal(err)
				}
				return sig
			})
		}, is: ErrBadAlgorithm},
		{name: "alg ES256", token: func(t *testing.T, e *rig) string {
			k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
			if err != nil {
				t.Fatal(err)
			}
			return forge(t, map[string]any{"alg": "ES256", "typ": "at+jwt", "kid": e.keyA.KeyID}, e.payload(), func(in []byte) []byte {
				d := sha256.Sum256(in)
				sig, err := ecdsa.SignASN1(rand.Reader, k, d[:])
				if err != nil {
					t.Fatal(err)
				}
				return sig
			})
		}, is: ErrBadAlgorithm},
		{name: "alg Ed25519 spelled differently", token: withHeader(func(h map[string]any) { h["alg"] = "Ed25519" }), is: ErrBadAlgorithm},

		// Header.
		{name: "typ missing", token: withHeader(func(h map[string]any) { delete(h, "typ") }), is: ErrMalformed},
		{name: "typ JWT", token: withHeader(func(h map[string]any) { h["typ"] = "JWT" }), is: ErrMalformed},
		{name: "typ not a string", token: withHeader(func(h map[string]any) { h["typ"] = 1 }), is: ErrMalformed},
		{name: "crit header", token: withHeader(func(h map[string]any) { h["crit"] = []string{"exp"}; h["exp"] = 1 }), is: ErrMalformed},
		{name: "b64 header", token: withHeader(func(h map[string]any) { h["b64"] = false; h["crit"] = []string{"b64"} }), is: ErrMalformed},
		{name: "b64 header without crit", token: withHeader(func(h map[string]any) { h["b64"] = true }), is: ErrMalformed},
		{name: "embedded jwk", token: withHeader(func(h map[string]any) {
			h["jwk"] = map[string]any{"kty": "OKP", "crv": "Ed25519", "x": "11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo"}
		}), is: ErrMalformed},
		{name: "no kid", token: withHeader(func(h map[string]any) { delete(h, "kid") }), is: ErrUnknownKey},
		{name: "unknown kid", token: withHeader(func(h map[string]any) { h["kid"] = "token-aaaaaaaaaaaaa" }), is: ErrUnknownKey},

		// Keys and signatures.
		{name: "kid of another tenant", token: func(t *testing.T, e *rig) string {
			// Claims say tenant A, signed by tenant B's key and naming it.
			return forge(t, edHeader(e.keyB.KeyID), e.payload(), e.signer(t, tenantB, e.keyB))
		}, is: ErrUnknownKey},
		{name: "kid of tenant A but signed by tenant B", token: func(t *testing.T, e *rig) string {
			return forge(t, edHeader(e.keyA.KeyID), e.payload(), e.signer(t, tenantB, e.keyB))
		}, is: ErrBadSignature},
		{name: "tenant claim switched to B", token: func(t *testing.T, e *rig) string {
			tok := e.mint(t, baseClaims())
			parts := strings.Split(tok, ".")
			p := decodeSegment(t, parts[1])
			p["tenant"] = tenantB
			ps, _ := jsonB64(p)
			return parts[0] + "." + ps + "." + parts[2]
		}, is: ErrUnknownKey},
		{name: "tampered payload", token: func(t *testing.T, e *rig) string {
			tok := e.mint(t, baseClaims())
			parts := strings.Split(tok, ".")
			p := decodeSegment(t, parts[1])
			p["scope"] = "alp.read alp.send alp.admin"
			ps, _ := jsonB64(p)
			return parts[0] + "." + ps + "." + parts[2]
		}, is: ErrBadSignature},
		{name: "tampered signature", token: func(t *testing.T, e *rig) string {
			tok := e.mint(t, baseClaims())
			b := []byte(tok)
			i := len(b) - 5
			if b[i] == 'A' {
				b[i] = 'B'
			} else {
				b[i] = 'A'
			}
			return string(b)
		}, is: ErrBadSignature},
		{name: "signature stripped", token: func(t *testing.T, e *rig) string {
			tok := e.mint(t, baseClaims())
			return tok[:strings.LastIndex(tok, ".")+1]
		}, is: ErrBadSignature},
		{name: "revoked key", token: minted(nil, func(e *rig) {
			if err := e.ks.Revoke(ctx, tenantA, Purpose, e.keyA.KeyID, time.Time{}); err != nil {
				panic(err)
			}
		}), is: ErrKeyRevoked},
		{name: "key revoked after the token was signed", token: minted(nil, func(e *rig) {
			// Even a compromise instant after iat voids the token: a
			// forger with the key can write any iat.
			e.clock.Add(time.Minute)
			if err := e.ks.Revoke(ctx, tenantA, Purpose, e.keyA.KeyID, e.clock.Now()); err != nil {
				panic(err)
			}
		}), is: ErrKeyRevoked},
		{name: "tenant not accepted by this verifier", token: func(t *testing.T, e *rig) string {
			c := baseClaims()
			c.Tenant = tenantC
			return e.mint(t, c)
		}, is: ErrWrongIssuer},
		{name: "key store unavailable", token: minted(nil, func(e *rig) { e.ver.Keys = failingKeys{} }), is: ErrUnavailable, code: CodeTemporarilyUnavailable},

		// Claims.
		{name: "wrong issuer", token: withPayload(func(_ *rig, p map[string]any) { p["iss"] = issuerB }), is: ErrWrongIssuer},
		{name: "wrong audience", token: minted(func(c *Claims) { c.Audience = "https://other.example/mcp" }, nil), is: ErrWrongAudience},
		{name: "audience with trailing slash", token: minted(func(c *Claims) { c.Audience = resource + "/" }, nil), is: ErrWrongAudience},
		{name: "two audiences", token: withPayload(func(_ *rig, p map[string]any) { p["aud"] = []string{resource, "https://other.example"} }), is: ErrWrongAudience},
		{name: "empty audience list", token: withPayload(func(_ *rig, p map[string]any) { p["aud"] = []string{} }), is: ErrWrongAudience},
		{name: "audience list of numbers", token: withPayload(func(_ *rig, p map[string]any) { p["aud"] = []int{1} }), is: ErrMalformed},
		{name: "audience a number", token: withPayload(func(_ *rig, p map[string]any) { p["aud"] = 7 }), is: ErrMalformed},
		{name: "bad class", token: withPayload(func(_ *rig, p map[string]any) { p["class"] = "admin" }), is: ErrMalformed},
		{name: "class wrong case", token: withPayload(func(_ *rig, p map[string]any) { p["class"] = "Company" }), is: ErrMalformed},
		{name: "claim of wrong type", token: withPayload(func(_ *rig, p map[string]any) { p["sub"] = 12 }), is: ErrMalformed},
		{name: "fractional exp", token: withPayload(func(_ *rig, p map[string]any) { p["exp"] = 1.5e9 + 0.5 }), is: ErrMalformed},

		// Times.
		{name: "expired", token: minted(nil, func(e *rig) { e.clock.Add(MaxLifetime + DefaultLeeway) }), is: ErrExpired, desc: "expired"},
		{name: "issued in the future", token: withPayload(func(e *rig, p map[string]any) {
			p["iat"] = e.clock.Now().Add(DefaultLeeway + time.Second).Unix()
			p["exp"] = p["iat"].(int64) + 60
		}), is: ErrNotYetValid},
		{name: "nbf in the future", token: withPayload(func(e *rig, p map[string]any) { p["nbf"] = e.clock.Now().Add(2 * time.Minute).Unix() }), is: ErrNotYetValid},
		{name: "lifetime over 10 minutes", token: withPayload(func(e *rig, p map[string]any) { p["exp"] = p["iat"].(int64) + 601 }), is: ErrLifetime},
		{name: "lifetime zero", token: withPayload(func(e *rig, p map[string]any) { p["exp"] = p["iat"] }), is: ErrLifetime},
		{name: "exp before iat", token: withPayload(func(e *rig, p map[string]any) { p["exp"] = p["iat"].(int64) - 10 }), is: ErrLifetime},
		{name: "huge exp", token: withPayload(func(e *rig, p map[string]any) { p["exp"] = int64(1) << 62 }), is: ErrLifetime},

		// Revocation.
		{name: "revoked grant", token: minted(nil, func(e *rig) { e.rev.grants[tenantA+"/grant-9"] = "grant withdrawn by person" }), is: ErrRevoked, desc: "grant withdrawn by person"},
		{name: "grant of same id in other tenant is not ours", token: minted(func(c *Claims) { c.Tenant = tenantB }, func(e *rig) {
			e.rev.grants[tenantB+"/grant-9"] = "withdrawn"
		}), is: ErrRevoked},
		{name: "person revoked after issuedAt", token: minted(nil, func(e *rig) {
			e.clock.Add(time.Minute)
			e.rev.persons[tenantA+"/person-7f3a"] = e.clock.Now()
		}), is: ErrRevoked},
		{name: "stale revocation projection", token: minted(nil, func(e *rig) { e.rev.stale = errors.New("projection 5m behind") }), is: ErrStale, code: CodeTemporarilyUnavailable},
		{name: "stale even if revoked", token: minted(nil, func(e *rig) {
			e.rev.stale = errors.New("behind")
			e.rev.grants[tenantA+"/grant-9"] = "withdrawn"
		}), is: ErrStale, code: CodeTemporarilyUnavailable},

		// Configuration: fail closed.
		{name: "no revocation checker", token: minted(nil, func(e *rig) { e.ver.Revocations = nil }), is: ErrMisconfigured, code: CodeServerError},
		{name: "no resource", token: minted(nil, func(e *rig) { e.ver.Resource = "" }), is: ErrMisconfigured, code: CodeServerError},
		{name: "no keys", token: minted(nil, func(e *rig) { e.ver.Keys = nil }), is: ErrMisconfigured, code: CodeServerError},
		{name: "leeway too large", token: minted(nil, func(e *rig) { e.ver.Leeway = time.Hour }), is: ErrMisconfigured, code: CodeServerError},
	}
	for _, claim := range []string{"iss", "sub", "aud", "exp", "iat", "jti", "client_id", "tenant", "agent", "grant", "class"} {
		tests = append(tests, tc{name: "missing " + claim, token: withPayload(func(_ *rig, p map[string]any) { delete(p, claim) }), is: ErrMalformed})
		if claim != "exp" && claim != "iat" {
			tests = append(tests, tc{name: "empty " + claim, token: withPayload(func(_ *rig, p map[string]any) { p[claim] = "" }), is: ErrMalformed})
		}
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newRig(t)
			tok := tt.token(t, e)
			claims, err := e.ver.Verify(ctx, tok)
			if err == nil {
				t.Fatalf("Verify accepted: %+v", claims)
			}
			if claims != nil {
				t.Errorf("claims returned with error")
			}
			if !errors.Is(err, tt.is) {
				t.Fatalf("err = %v, want %v", err, tt.is)
			}
			var te *Error
			if !errors.As(err, &te) {
				t.Fatalf("err %T is not *Error", err)
			}
			code := tt.code
			if code == "" {
				code = CodeInvalidToken
			}
			if te.Code != code {
				t.Errorf("code = %q, want %q", te.Code, code)
			}
			if tt.desc != "" && !strings.Contains(te.Description, tt.desc) {
				t.Errorf("description %q lacks %q", te.Description, tt.desc)
			}
			assertNoLeak(t, err, tok)
		})
	}
}

func jsonB64(v any) (string, error) {
	b, err := json.Marshal(v)
	return b64(b), err
}

func TestVerifyAccepts(t *testing.T) {
	ctx := context.Background()
	tests := []struct {
		name  string
		token func(t *testing.T, e *rig) string
	}{
		{"typ application/at+jwt", func(t *testing.T, e *rig) string {
			h := edHeader(e.keyA.KeyID)
			h["typ"] = "application/AT+JWT"
			return forge(t, h, e.payload(), e.signer(t, tenantA, e.keyA))
		}},
		{"aud as one-element array", func(t *testing.T, e *rig) string {
			p := e.payload()
			p["aud"] = []string{resource}
			return forge(t, edHeader(e.keyA.KeyID), p, e.signer(t, tenantA, e.keyA))
		}},
		{"exactly 10 minutes", func(t *testing.T, e *rig) string {
			p := e.payload()
			p["exp"] = p["iat"].(int64) + 600
			return forge(t, edHeader(e.keyA.KeyID), p, e.signer(t, tenantA, e.keyA))
		}},
		{"iat within leeway in the future", func(t *testing.T, e *rig) string {
			p := e.payload()
			p["iat"] = p["iat"].(int64) + 20
			return forge(t, edHeader(e.keyA.KeyID), p, e.signer(t, tenantA, e.keyA))
		}},
		{"nbf in the past", func(t *testing.T, e *rig) string {
			p := e.payload()
			p["nbf"] = p["iat"]
			return forge(t, edHeader(e.keyA.KeyID), p, e.signer(t, tenantA, e.keyA))
		}},
		{"expired within leeway", func(t *testing.T, e *rig) string {
			tok := e.mint(t, baseClaims())
			e.clock.Add(MaxLifetime + DefaultLeeway - time.Second)
			return tok
		}},
		{"retired key still verifies", func(t *testing.T, e *rig) string {
			tok := e.mint(t, baseClaims())
			if _, err := e.ks.Rotate(ctx, tenantA, Purpose); err != nil {
				t.Fatal(err)
			}
			e.clock.Add(5 * time.Minute)
			return tok
		}},
		{"explicitly retired key", func(t *testing.T, e *rig) string {
			tok := e.mint(t, baseClaims())
			if err := e.ks.Retire(ctx, tenantA, Purpose, e.keyA.KeyID); err != nil {
				t.Fatal(err)
			}
			return tok
		}},
		{"person revoked before issuedAt", func(t *testing.T, e *rig) string {
			// The person's earlier tokens were revoked; this one was issued
			// after that (e.g. after a new sign-in) and is good.
			e.rev.persons[tenantA+"/person-7f3a"] = e.clock.Now().Add(-time.Second)
			return e.mint(t, baseClaims())
		}},
		{"other grant revoked", func(t *testing.T, e *rig) string {
			e.rev.grants[tenantA+"/grant-other"] = "withdrawn"
			return e.mint(t, baseClaims())
		}},
		{"unknown extra claims ignored", func(t *testing.T, e *rig) string {
			p := e.payload()
			p["auth_time"] = p["iat"]
			return forge(t, edHeader(e.keyA.KeyID), p, e.signer(t, tenantA, e.keyA))
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newRig(t)
			tok := tt.token(t, e)
			if _, err := e.ver.Verify(ctx, tok); err != nil {
				t.Fatalf("Verify: %v", err)
			}
		})
	}
}

func TestVerifyLeewayAndStaleness(t *testing.T) {
	ctx := context.Background()
	e := newRig(t)
	e.ver.Leeway = -1 // none
	e.ver.MaxStaleness = 7 * time.Second
	tok := e.mint(t, baseClaims())
	e.clock.Add(MaxLifetime - time.Second)
	if _, err := e.ver.Verify(ctx, tok); err != nil {
		t.Fatalf("one second before exp: %v", err)
	}
	if e.rev.gotStaleness != 7*time.Second {
		t.Errorf("Fresh got %v, want 7s", e.rev.gotStaleness)
	}
	e.clock.Add(time.Second)
	if _, err := e.ver.Verify(ctx, tok); !errors.Is(err, ErrExpired) {
		t.Fatalf("at exp without leeway: err = %v, want ErrExpired", err)
	}
	e.ver.Leeway = MaxLeeway
	if _, err := e.ver.Verify(ctx, tok); err != nil {
		t.Fatalf("at exp with leeway: %v", err)
	}
	// A stale projection is not asked whether the token is revoked.
	e.rev.stale = errors.New("behind")
	calls := e.rev.revokedCalls
	if _, err := e.ver.Verify(ctx, tok); !errors.Is(err, ErrStale) {
		t.Fatalf("err = %v, want ErrStale", err)
	}
	if e.rev.revokedCalls != calls {
		t.Errorf("Revoked consulted while stale")
	}
}

func TestVerifyConcurrentWithRotation(t *testing.T) {
	ctx := context.Background()
	e := newRig(t)
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for g := range 8 {
		wg.Go(func() {
			for i := range 30 {
				if g == 0 && i%10 == 0 {
					if _, err := e.ks.Rotate(ctx, tenantA, Purpose); err != nil {
						errs <- err
						return
					}
				}
				tok, err := e.iss.Mint(ctx, baseClaims())
				if err != nil {
					errs <- fmt.Errorf("mint: %w", err)
					return
				}
				if _, err := e.ver.Verify(ctx, tok); err != nil {
					errs <- fmt.Errorf("verify: %w", err)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

func TestRequireScopes(t *testing.T) {
	c := &Claims{Scopes: []string{"alp.read", "alp.send"}}
	if err := RequireScopes(c); err != nil {
		t.Errorf("no scopes needed: %v", err)
	}
	if err := RequireScopes(c, "alp.read", "alp.send"); err != nil {
		t.Errorf("held scopes: %v", err)
	}
	err := RequireScopes(c, "alp.read", "alp.admin", "alp.audit")
	var te *Error
	if !errors.As(err, &te) || !errors.Is(err, ErrInsufficientScope) {
		t.Fatalf("err = %v", err)
	}
	if te.Code != CodeInsufficientScope || te.HTTPStatus() != 403 {
		t.Errorf("code %q status %d", te.Code, te.HTTPStatus())
	}
	if te.Scope != "alp.read alp.admin alp.audit" || !strings.Contains(te.Description, "alp.admin alp.audit") || strings.Contains(te.Description, "alp.read") {
		t.Errorf("scope %q description %q", te.Scope, te.Description)
	}
	if got, want := te.WWWAuthenticate("https://b.example/rm"), `Bearer error="insufficient_scope", error_description="the token lacks scope alp.admin alp.audit", scope="alp.read alp.admin alp.audit", resource_metadata="https://b.example/rm"`; got != want {
		t.Errorf("challenge:\n got %s\nwant %s", got, want)
	}
	if err := RequireScopes(nil, "alp.read"); !errors.Is(err, ErrMalformed) {
		t.Errorf("nil claims: %v", err)
	}
	if err := RequireScopes(&Claims{}, "alp.read"); !errors.Is(err, ErrInsufficientScope) {
		t.Errorf("no scopes: %v", err)
	}
}

func TestWWWAuthenticate(t *testing.T) {
	const rm = "https://broker.example/.well-known/oauth-protected-resource/mcp"
	e := newError(ErrExpired, "token expired")
	if got, want := e.WWWAuthenticate(rm), `Bearer error="invalid_token", error_description="token expired", resource_metadata="`+rm+`"`; got != want {
		t.Errorf("got  %s\nwant %s", got, want)
	}
	if got, want := e.WWWAuthenticate(""), `Bearer error="invalid_token", error_description="token expired"`; got != want {
		t.Errorf("got  %s\nwant %s", got, want)
	}
	odd := &Error{Code: CodeInvalidToken, Description: "a \"quoted\" \\ back\r\nInjected: yes\x00é"}
	if got, want := odd.WWWAuthenticate(`https://x.example/"a"`), `Bearer error="invalid_token", error_description="a \"quoted\" \\ back??Injected: yes???", resource_metadata="https://x.example/\"a\""`; got != want {
		t.Errorf("got  %s\nwant %s", got, want)
	}
	if got, want := Challenge(rm), `Bearer resource_metadata="`+rm+`"`; got != want {
		t.Errorf("Challenge = %s, want %s", got, want)
	}
	if got, want := Challenge(rm, "alp.read", "alp.send"), `Bearer scope="alp.read alp.send", resource_metadata="`+rm+`"`; got != want {
		t.Errorf("Challenge = %s, want %s", got, want)
	}
	if got, want := Challenge(""), "Bearer"; got != want {
		t.Errorf("Challenge = %s, want %s", got, want)
	}
	stale := newError(ErrStale, "stale")
	if stale.Code != CodeTemporarilyUnavailable || stale.HTTPStatus() != 503 {
		t.Errorf("stale: %q %d", stale.Code, stale.HTTPStatus())
	}
	if e.HTTPStatus() != 401 || newError(ErrMisconfigured, "x").HTTPStatus() != 500 {
		t.Errorf("statuses")
	}
	if got := e.Error(); got != "accesstoken: invalid_token: token expired" {
		t.Errorf("Error() = %q", got)
	}
	if got := (&Error{Code: CodeInvalidToken}).Error(); got != "accesstoken: invalid_token" {
		t.Errorf("Error() = %q", got)
	}
	for _, s := range []error{ErrExpired, ErrWrongAudience, ErrRevoked, ErrStale, ErrBadSignature, ErrMalformed, ErrUnknownKey} {
		if err := newError(s, "x"); !errors.Is(err, s) || (s != ErrExpired && errors.Is(err, ErrExpired)) {
			t.Errorf("sentinel %v does not match exactly", s)
		}
	}
}

func TestBearerToken(t *testing.T) {
	for _, tt := range []struct {
		in, tok string
		ok      bool
	}{
		{"Bearer abc.def.ghi", "abc.def.ghi", true},
		{"bearer abc", "abc", true},
		{"BEARER  abc", "abc", true},
		{"", "", false},
		{"Bearer", "", false},
		{"Bearer ", "", false},
		{"Basic dXNlcjpwYXNz", "", false},
		{"Bearer a b", "", false},
		{"Bearerabc", "", false},
	} {
		tok, ok := BearerToken(tt.in)
		if tok != tt.tok || ok != tt.ok {
			t.Errorf("BearerToken(%q) = %q, %v; want %q, %v", tt.in, tok, ok, tt.tok, tt.ok)
		}
	}
}

// notEd25519 is a crypto.Signer with an ECDSA key.
type notEd25519 struct{ crypto.Signer }

func TestOpaqueSigner(t *testing.T) {
	k, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if _, err := NewOpaqueSigner(notEd25519{k}, "x"); err == nil {
		t.Error("accepted an ECDSA signer")
	}
	e := newRig(t)
	s, err := e.ks.Signer(context.Background(), tenantA, Purpose, e.keyA.KeyID)
	if err != nil {
		t.Fatal(err)
	}
	op, err := NewOpaqueSigner(s, e.keyA.KeyID)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := op.SignPayload([]byte("x"), "HS256"); err == nil {
		t.Error("signed with HS256")
	}
	if pk := op.Public(); pk.KeyID != e.keyA.KeyID || !pk.IsPublic() || pk.Algorithm != "EdDSA" {
		t.Errorf("Public = %+v", pk)
	}
}

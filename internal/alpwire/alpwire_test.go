package alpwire

import (
	"crypto/ed25519"
	"net/http"
	"strings"
	"testing"
	"time"
)

func testKeys(t *testing.T) (*BrokerKeys, ed25519.PrivateKey, string) {
	t.Helper()
	cur := ed25519.NewKeyFromSeed(make([]byte, 32))
	old := ed25519.NewKeyFromSeed([]byte(strings.Repeat("o", 32)))
	rev := ed25519.NewKeyFromSeed([]byte(strings.Repeat("r", 32)))
	pk := func(k ed25519.PrivateKey) string { return b64url.EncodeToString(k.Public().(ed25519.PublicKey)) }
	kid := func(k ed25519.PrivateKey) string { return KeyID(k.Public().(ed25519.PublicKey)) }
	b := &BrokerKeys{Broker: "broker.a.example", BrokerURL: "https://broker.a.example", FederationURL: "https://broker.a.example/federation/v1",
		VerifyKeys:    map[string]VerifyKey{kid(cur): {Key: pk(cur), ValidFromTS: 2000}},
		OldVerifyKeys: map[string]OldVerifyKey{kid(old): {Key: pk(old), ValidFromTS: 1000, ExpiredTS: 2000}},
		RevokedKeys:   map[string]RevokedKey{kid(rev): {Key: pk(rev), CompromisedTS: 1500}},
		ValidUntilTS:  10_000}
	raw, err := SignBrokerKeys(b, kid(cur), cur)
	if err != nil {
		t.Fatal(err)
	}
	parsed, err := ParseBrokerKeys(raw)
	if err != nil {
		t.Fatal(err)
	}
	return parsed, cur, kid(cur)
}

// The key rule: current always, old only before expired_ts (and from its
// valid_from_ts), revoked only before compromised_ts.
func TestKeyRule(t *testing.T) {
	b, _, cur := testKeys(t)
	var old, rev string
	for id := range b.OldVerifyKeys {
		old = id
	}
	for id := range b.RevokedKeys {
		rev = id
	}
	for _, c := range []struct {
		id   string
		at   int64
		code string
	}{
		{cur, 0, ""}, {cur, 9_000_000, ""},
		{old, 1000, ""}, {old, 1999, ""}, {old, 2000, CodeKeyExpired}, {old, 999, CodeKeyExpired}, {old, 5000, CodeKeyExpired},
		{rev, 1499, ""}, {rev, 1500, CodeKeyRevoked}, {rev, 9000, CodeKeyRevoked},
		{"ed25519:nosuch", 0, CodeUnknownKey},
	} {
		_, err := b.Key(c.id, Time(c.at))
		if CodeOf(err) != c.code {
			t.Errorf("Key(%s, %d) = %v, want code %q", c.id, c.at, err, c.code)
		}
	}
	if got := b.CacheUntil(Time(0)); !got.Equal(Time(10_000)) {
		t.Errorf("CacheUntil = %v, want valid_until", got)
	}
	if got, want := b.CacheUntil(Time(-KeyCacheCap.Milliseconds())), Time(0); !got.Equal(want) {
		t.Errorf("CacheUntil = %v, want now+7d %v", got, want)
	}
}

func TestVerifyRequest(t *testing.T) {
	b, cur, kid := testKeys(t)
	keys := func(broker, id string, at time.Time) (ed25519.PublicKey, error) {
		if broker != b.Broker {
			return nil, &Error{Code: CodeUnknownKey, Message: "no broker " + broker}
		}
		return b.Key(id, at)
	}
	now := time.UnixMilli(1_000_000)
	body := []byte(`{"x":1}`)
	signed := func(t *testing.T, target string, body []byte, at time.Time) *http.Request {
		t.Helper()
		out, err := http.NewRequest("POST", "https://broker.b.example"+target, strings.NewReader(string(body)))
		if err != nil {
			t.Fatal(err)
		}
		if err := SignRequest(out, body, b.Broker, "broker.b.example", kid, cur, at); err != nil {
			t.Fatal(err)
		}
		// As the server sees it.
		in, _ := http.NewRequest("POST", target, strings.NewReader(string(body)))
		in.RequestURI = target
		in.Header = out.Header.Clone()
		return in
	}
	const skew = time.Minute
	if a, err := VerifyRequest(signed(t, "/federation/v1/send?a=1", body, now), body, "broker.b.example", keys, now, skew); err != nil || a.Origin != b.Broker {
		t.Fatalf("VerifyRequest = %+v, %v", a, err)
	}
	for _, c := range []struct {
		name string
		req  func() *http.Request
		body []byte
		dest string
		code string
	}{
		{"tampered body", func() *http.Request { return signed(t, "/federation/v1/send", body, now) }, []byte(`{"x":2}`), "broker.b.example", CodeBadSignature},
		{"body dropped", func() *http.Request { return signed(t, "/federation/v1/send", body, now) }, nil, "broker.b.example", CodeBadSignature},
		{"other path", func() *http.Request {
			r := signed(t, "/federation/v1/send", body, now)
			r.RequestURI = "/federation/v1/receipt"
			return r
		}, body, "broker.b.example", CodeBadSignature},
		{"other method", func() *http.Request {
			r := signed(t, "/federation/v1/send", body, now)
			r.Method = "PUT"
			return r
		}, body, "broker.b.example", CodeBadSignature},
		{"other destination", func() *http.Request { return signed(t, "/federation/v1/send", body, now) }, body, "broker.c.example", CodeWrongDestination},
		{"too old", func() *http.Request { return signed(t, "/federation/v1/send", body, now.Add(-skew-time.Millisecond)) }, body, "broker.b.example", CodeClockSkew},
		{"from the future", func() *http.Request { return signed(t, "/federation/v1/send", body, now.Add(skew+time.Millisecond)) }, body, "broker.b.example", CodeClockSkew},
		{"no header", func() *http.Request { return &http.Request{Method: "POST", RequestURI: "/", Header: http.Header{}} }, body, "broker.b.example", CodeBadAuthorization},
		{"two headers", func() *http.Request {
			r := signed(t, "/federation/v1/send", body, now)
			r.Header.Add("Authorization", r.Header.Get("Authorization"))
			return r
		}, body, "broker.b.example", CodeBadAuthorization},
	} {
		if _, err := VerifyRequest(c.req(), c.body, c.dest, keys, now, skew); CodeOf(err) != c.code {
			t.Errorf("%s: %v, want %s", c.name, err, c.code)
		}
	}
}

// An old key never verifies a new request; a revoked one neither.
func TestVerifyRequestOldKey(t *testing.T) {
	b, _, _ := testKeys(t)
	old := ed25519.NewKeyFromSeed([]byte(strings.Repeat("o", 32)))
	keys := func(_, id string, at time.Time) (ed25519.PublicKey, error) { return b.Key(id, at) }
	now := time.UnixMilli(5000)
	r, _ := http.NewRequest("GET", "/federation/v1/x", nil)
	r.RequestURI = "/federation/v1/x"
	if err := SignRequest(r, nil, b.Broker, "broker.b.example", KeyID(old.Public().(ed25519.PublicKey)), old, now); err != nil {
		t.Fatal(err)
	}
	if _, err := VerifyRequest(r, nil, "broker.b.example", keys, now, time.Minute); CodeOf(err) != CodeKeyExpired {
		t.Fatalf("old key: %v, want %s", err, CodeKeyExpired)
	}
}

// A signature made for one kind of object never verifies as another.
func TestContextSeparation(t *testing.T) {
	priv := ed25519.NewKeyFromSeed(make([]byte, 32))
	pub := priv.Public().(ed25519.PublicKey)
	kid := KeyID(pub)
	a := &Accepted{ID: "0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b", EnvelopeSHA256: Digest([]byte("x")), Receiver: "broker.b.example", AcceptedTS: 1}
	raw, err := SignAccepted(a, kid, priv)
	if err != nil {
		t.Fatal(err)
	}
	keys := func(string, string, time.Time) (ed25519.PublicKey, error) { return pub, nil }
	if err := VerifySigned(raw, CtxAccepted, "broker.b.example", keys, time.Now()); err != nil {
		t.Fatal(err)
	}
	for _, ctx := range []string{CtxEnvelope, CtxReceipt, CtxBrokerKeys, CtxRequest} {
		if err := VerifySigned(raw, ctx, "broker.b.example", keys, time.Now()); CodeOf(err) != CodeBadSignature {
			t.Errorf("as %s: %v, want %s", ctx, err, CodeBadSignature)
		}
	}
	// Reformatted bytes (member order, whitespace) are the same object.
	reordered := strings.Replace(string(raw), `{"accepted_ts":1,`, "{ \"accepted_ts\" : 1 ,\n", 1)
	if err := VerifySigned([]byte(reordered), CtxAccepted, "broker.b.example", keys, time.Now()); err != nil {
		t.Errorf("reformatted: %v", err)
	}
}

// Signing refuses what parsing would refuse: a float in the body, an
// unknown signer, a key id of the KeyStore's own form.
func TestSignRefuses(t *testing.T) {
	priv := ed25519.NewKeyFromSeed(make([]byte, 32))
	kid := KeyID(priv.Public().(ed25519.PublicKey))
	e := benchEnvelope()
	e.Body = []byte(`{"x":1.5}`)
	if _, err := SignEnvelope(e, e.Origin, kid, priv); CodeOf(err) != CodeNotInteger {
		t.Errorf("float body: %v", err)
	}
	e = benchEnvelope()
	if _, err := SignEnvelope(e, "broker.c.example", kid, priv); err == nil {
		t.Error("signed as a broker other than the origin")
	}
	if _, err := SignEnvelope(e, e.Origin, "ed25519:federation-mfrggzdfmztwq2l", priv); CodeOf(err) != CodeBadKeyID {
		t.Errorf("KeyStore id form: %v", err)
	}
	if err := ValidateKeyID(kid); err != nil {
		t.Errorf("KeyID %s: %v", kid, err)
	}
}

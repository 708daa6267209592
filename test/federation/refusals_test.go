package federation_test

import (
	"bytes"
	"context"
	"crypto"
	"crypto/ed25519"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	alpv1 "github.com/alpd-project/alpd/gen/alp/v1"
	"github.com/alpd-project/alpd/internal/alpwire"
	"github.com/alpd-project/alpd/internal/testkit"
)

// forger signs requests with a broker's own federation key, read from its
// key file: what a broker sends, made by the test so that it can be
// replayed, aged or tampered with.
type forger struct {
	origin string
	keyID  string
	signer crypto.Signer
}

func newForger(t testing.TB, b *Broker) forger {
	t.Helper()
	ctx := context.Background()
	ks := b.KeyStore(t)
	info, err := ks.Active(ctx, b.Name, alpv1.KeyPurpose_KEY_PURPOSE_FEDERATION)
	if err != nil {
		t.Fatal(err)
	}
	s, err := ks.Signer(ctx, b.Name, alpv1.KeyPurpose_KEY_PURPOSE_FEDERATION, info.KeyID)
	if err != nil {
		t.Fatal(err)
	}
	return forger{origin: b.Name, keyID: alpwire.KeyID(s.Public().(ed25519.PublicKey)), signer: s}
}

// envelope signs an envelope from ana@a.example to to, of type typ.
func (f forger) envelope(t testing.TB, to, typ, body string, created time.Time, mutate func(*alpwire.Envelope)) []byte {
	t.Helper()
	e := &alpwire.Envelope{ID: uuid.Must(uuid.NewV7()).String(), Origin: f.origin, From: "ana@a.example", FromAgent: "desk",
		AgentClass: alpwire.AgentConsumer, To: to, Type: typ, Body: json.RawMessage(body),
		CreatedTS: created.UnixMilli(), ExpiresTS: created.Add(time.Hour).UnixMilli()}
	e.Destination = to[strings.Index(to, "@")+1:]
	if mutate != nil {
		mutate(e)
	}
	raw, err := alpwire.SignEnvelope(e, f.origin, f.keyID, f.signer)
	if err != nil {
		t.Fatal(err)
	}
	return raw
}

// request is a signed POST of body to the receiver's send endpoint.
type request struct {
	body []byte
	auth string
}

func (f forger) request(t testing.TB, to *Broker, body []byte, at time.Time) request {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, to.URL+"/federation/v1/send", bytes.NewReader(body))
	if err := alpwire.SignRequest(req, body, f.origin, to.Name, f.keyID, f.signer, at); err != nil {
		t.Fatal(err)
	}
	return request{body: body, auth: req.Header.Get("Authorization")}
}

// post sends r to the broker as is and returns the status, the problem's
// code and Retry-After.
func (h *Harness) post(t testing.TB, to *Broker, r request) (int, string, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, to.URL+"/federation/v1/send", bytes.NewReader(r.body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", r.auth)
	resp, err := h.AgentClient().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var p struct {
		Code string `json:"code"`
	}
	_ = json.Unmarshal(raw, &p)
	return resp.StatusCode, p.Code, resp.Header.Get("Retry-After")
}

// TestReceiverRefuses drives b.example's receiver with requests signed by
// a.example's home broker's own key, each failing one check: every one is
// refused with its code, each is recorded on b.example (an unhosted
// destination is logged: no tenant there owns it), and nothing of them
// reaches lee.
func TestReceiverRefuses(t *testing.T) {
	h := New(t, BrokerSpec{Name: "broker.a.example", Domains: []string{"a.example"}, Users: []string{"ana"}},
		BrokerSpec{Name: "broker.b.example", Domains: []string{"b.example"}, Users: []string{"lee"},
			Config: func(c map[string]any) { c["federation"].(map[string]any)["stranger_rate"] = "3/min" }})
	a, b := h.Broker("broker.a.example"), h.Broker("broker.b.example")
	b.SignIn(t, "b.example", "lee")
	f := newForger(t, a)
	now := time.Now()
	signed := func(typ string) []byte {
		return f.envelope(t, "lee@b.example", typ, `{"purpose":"meeting"}`, now, nil)
	}

	// A stranger's connection request passes: the baseline.
	good := f.request(t, b, signed("connection.request/v1"), time.Now())
	if status, code, _ := h.post(t, b, good); status != http.StatusAccepted {
		t.Fatalf("a valid connection request: %d %s", status, code)
	}
	cases := []struct {
		name   string
		r      request
		status int
		code   string
	}{
		{"a replay of a captured request", good, http.StatusUnauthorized, "replay"},
		{"an expired envelope", f.request(t, b, f.envelope(t, "lee@b.example", "connection.request/v1", `{"purpose":"meeting"}`,
			now.Add(-2*time.Hour), nil), time.Now()), http.StatusBadRequest, "expired"},
		{"a request signed beyond the skew", f.request(t, b, signed("connection.request/v1"), time.Now().Add(-10*time.Minute)),
			http.StatusUnauthorized, "clock_skew"},
		{"a tampered body", func() request {
			r := f.request(t, b, signed("connection.request/v1"), time.Now())
			r.body = bytes.Replace(r.body, []byte(`"meeting"`), []byte(`"sales"`), 1)
			return r
		}(), http.StatusUnauthorized, "bad_signature"},
		{"a destination b.example does not host", f.request(t, b, f.envelope(t, "lee@c.example", "connection.request/v1",
			`{"purpose":"meeting"}`, now, nil), time.Now()), http.StatusNotFound, "unknown_destination"},
		{"a stranger's note", f.request(t, b, f.envelope(t, "lee@b.example", "note/v1", `{"text":"hi"}`, now, nil), time.Now()),
			http.StatusForbidden, "stranger_type"},
		{"a request for another broker", func() request {
			body := signed("connection.request/v1")
			req, _ := http.NewRequest(http.MethodPost, b.URL+"/federation/v1/send", bytes.NewReader(body))
			_ = alpwire.SignRequest(req, body, f.origin, "broker.c.example", f.keyID, f.signer, time.Now())
			return request{body: body, auth: req.Header.Get("Authorization")}
		}(), http.StatusUnauthorized, "wrong_destination"},
	}
	for _, c := range cases {
		if status, code, _ := h.post(t, b, c.r); status != c.status || code != c.code {
			t.Errorf("%s: %d %s, want %d %s", c.name, status, code, c.status, c.code)
		}
	}

	// The stranger flood: 3 a minute, the baseline took one; the fourth
	// is 429 with Retry-After, exactly after the limit.
	for i := 2; i <= 4; i++ {
		status, code, retry := h.post(t, b, f.request(t, b, signed("connection.request/v1"), time.Now()))
		switch {
		case i <= 3 && status != http.StatusAccepted:
			t.Errorf("connection request %d of 3: %d %s", i, status, code)
		case i == 4 && (status != http.StatusTooManyRequests || code != "rate_limited" || retry == ""):
			t.Errorf("connection request 4 beyond 3/min: %d %s Retry-After %q, want 429 rate_limited", status, code, retry)
		}
	}

	want := []string{"replay", "expired", "clock_skew", "bad_signature", "stranger_type", "rate_limited"}
	testkit.Eventually(t, 10*time.Second, func() error {
		got := refusals(t, b)
		for _, w := range want {
			if !slices.Contains(got, w) {
				return fmt.Errorf("b.example recorded %v, want %s among them", got, w)
			}
		}
		return nil
	}, "every refusal recorded")
	if out := b.Output(); !strings.Contains(out, `"code":"unknown_destination"`) || !strings.Contains(out, `"code":"wrong_destination"`) {
		t.Error("b.example did not log the refusals it cannot record on a tenant's log")
	}
	// Only the three connection requests within the rate were accepted.
	verified := 0
	for _, m := range b.StreamMessages(t, "INBOUND") {
		if strings.Contains(m.Subject, ".verified.") {
			verified++
		}
	}
	if verified != 3 {
		t.Errorf("b.example accepted %d envelopes, want the 3 connection requests within the rate", verified)
	}
}

// TestRevokedKey: a.example's broker key is revoked as compromised (its
// operator, on the stopped broker: alpctl keys revoke does the same). A
// request signed with it after the compromise, captured before, is refused
// by b.example once it reads a.example's published keys, while the broker's
// new key gets through.
func TestRevokedKey(t *testing.T) {
	h := New(t, BrokerSpec{Name: "broker.a.example", Domains: []string{"a.example"}, Users: []string{"ana"}},
		BrokerSpec{Name: "broker.b.example", Domains: []string{"b.example"}, Users: []string{"lee"}})
	a, b := h.Broker("broker.a.example"), h.Broker("broker.b.example")
	b.SignIn(t, "b.example", "lee")
	f := newForger(t, a)
	compromised := time.Now().Add(-time.Minute)
	captured := f.request(t, b, f.envelope(t, "lee@b.example", "connection.request/v1", `{"purpose":"sales"}`, time.Now(), nil), time.Now())

	a.Stop(t)
	ctx := context.Background()
	ks := a.KeyStore(t)
	info, err := ks.Active(ctx, a.Name, alpv1.KeyPurpose_KEY_PURPOSE_FEDERATION)
	if err != nil {
		t.Fatal(err)
	}
	if err := ks.Revoke(ctx, a.Name, alpv1.KeyPurpose_KEY_PURPOSE_FEDERATION, info.KeyID, compromised); err != nil {
		t.Fatal(err)
	}
	a.Start(t)
	// b.example forgets what it cached of a.example's keys (they are
	// cached for an hour: how long a peer may trust a revoked key).
	b.Restart(t)

	if status, code, _ := h.post(t, b, captured); status != http.StatusUnauthorized || code != "key_revoked" {
		t.Errorf("a request signed with the revoked key: %d %s, want 401 key_revoked", status, code)
	}
	testkit.Eventually(t, 10*time.Second, func() error {
		if got := refusals(t, b); !slices.Contains(got, "key_revoked") {
			return fmt.Errorf("b.example recorded %v, want key_revoked", got)
		}
		return nil
	}, "the refusal recorded")
	anaTok, _ := a.PAT(t, "a.example", "ana", "desk", "alp.send", "alp.read")
	id := h.send(t, a, anaTok, "lee@b.example", "connection.request/v1", map[string]any{"purpose": "meeting"})
	h.waitDelivery(t, a, anaTok, id, "held")
}

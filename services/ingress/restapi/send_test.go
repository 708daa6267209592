package restapi_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/alpd-project/alpd/broker"
	"github.com/alpd-project/alpd/internal/accesstoken"
	"github.com/alpd-project/alpd/services/ingress"
	"github.com/alpd-project/alpd/services/ingress/restapi"
)

// A PAT and an OAuth access token both send; the answer is policy's
// outcome with its status URL, which answers the same.
func TestSendAndStatus(t *testing.T) {
	r := newRig(t, restapi.Config{})
	for name, token := range map[string]string{"pat": r.anaPAT, "oauth": r.ana.Token} {
		a := r.do(t, http.MethodPost, restapi.PathMessages, token, send("bo@example.org"))
		if a.status != http.StatusOK && a.status != http.StatusAccepted {
			t.Fatalf("%s: send: %s", name, a)
		}
		out := a.json(t)
		id, _ := out["envelope_id"].(string)
		if out["to"] != "bo@example.org" || out["type"] != "meeting.request/v1" || out["status"] != publicURL+restapi.PathMessages+"/"+id {
			t.Errorf("%s: send answered %s", name, a)
		}
		st := r.do(t, http.MethodGet, restapi.PathMessages+"/"+id, token, nil)
		if st.status != http.StatusOK || st.json(t)["envelope_id"] != id {
			t.Errorf("%s: status: %s", name, st)
		}
	}
	// Another person's envelope is unknown to this one.
	a := r.do(t, http.MethodPost, restapi.PathMessages, r.anaPAT, send("bo@example.org"))
	id := a.json(t)["envelope_id"].(string)
	if st := r.do(t, http.MethodGet, restapi.PathMessages+"/"+id, r.bo.Token, nil); st.status != http.StatusNotFound || st.code() != restapi.CodeUnknownEnvelope {
		t.Errorf("bo reads ana's envelope: %s", st)
	}
	if st := r.do(t, http.MethodGet, restapi.PathMessages+"/not-a-uuid", r.anaPAT, nil); st.status != http.StatusBadRequest || st.code() != restapi.CodeInvalidEnvelopeID {
		t.Errorf("a malformed id: %s", st)
	}
}

// The same Idempotency-Key and request is the same envelope, stored once;
// the same key with another body is refused and stores nothing.
func TestIdempotencyKey(t *testing.T) {
	r := newRig(t, restapi.Config{})
	first := r.do(t, http.MethodPost, restapi.PathMessages, r.anaPAT, send("bo@example.org"), "Idempotency-Key", "k-1")
	if first.status >= 300 {
		t.Fatal(first)
	}
	stored := r.sendCount(t)
	again := r.do(t, http.MethodPost, restapi.PathMessages, r.anaPAT, send("bo@example.org"), "Idempotency-Key", "k-1")
	if again.json(t)["envelope_id"] != first.json(t)["envelope_id"] || again.json(t)["duplicate"] != true {
		t.Errorf("a retry: %s, first %s", again, first)
	}
	other := send("bo@example.org")
	other["body"] = map[string]any{"subject": "Another", "start": "2026-12-03T10:00:00Z", "duration": "PT30M", "attendees": []string{"bo@example.org"}}
	if a := r.do(t, http.MethodPost, restapi.PathMessages, r.anaPAT, other, "Idempotency-Key", "k-1"); a.status != http.StatusUnprocessableEntity || a.code() != restapi.CodeIdempotencyBodyMismatch {
		t.Errorf("the key with another body: %s", a)
	}
	if a := r.do(t, http.MethodPost, restapi.PathMessages, r.anaPAT, send("cy@partner.example"), "Idempotency-Key", "k-1"); a.status != http.StatusUnprocessableEntity || a.code() != restapi.CodeIdempotencyKeyReused {
		t.Errorf("the key to another recipient: %s", a)
	}
	if n := r.sendCount(t); n != stored {
		t.Errorf("%d events stored after the retry and the refusals, want %d", n, stored)
	}
	if a := r.do(t, http.MethodPost, restapi.PathMessages, r.anaPAT, send("bo@example.org"), "Idempotency-Key", "with space"); a.code() != restapi.CodeInvalidIdempotencyKey {
		t.Errorf("a key with a space: %s", a)
	}
}

// A credential without the scope is refused before anything is read or
// stored, with the challenge naming the scope.
func TestScopes(t *testing.T) {
	r := newRig(t, restapi.Config{})
	readOnly := r.pat(t, r.ana, "alp.read")
	sendOnly := r.pat(t, r.ana, "alp.send")
	before := r.sendCount(t)
	for _, c := range []struct {
		name, method, path, token string
		body                      any
		scope                     string
	}{
		{"send with a read-only PAT", http.MethodPost, restapi.PathMessages, readOnly, send("bo@example.org"), "alp.send"},
		{"connect with a read-only PAT", http.MethodPost, restapi.PathConnections, readOnly, map[string]any{"to": "cy@partner.example", "purpose": "meeting"}, "alp.send"},
		{"connections with a send-only PAT", http.MethodGet, restapi.PathConnections, sendOnly, nil, "alp.read"},
		{"send with a read-only token", http.MethodPost, restapi.PathMessages, r.br.Mint(t, r.ana, accesstoken.ClassConsumer, "alp.read"), send("bo@example.org"), "alp.send"},
	} {
		a := r.do(t, c.method, c.path, c.token, c.body)
		if a.status != http.StatusForbidden || a.code() != restapi.CodeInsufficientScope ||
			!strings.Contains(a.header.Get("WWW-Authenticate"), `scope="`+c.scope+`"`) {
			t.Errorf("%s: %s %v", c.name, a, a.header.Get("WWW-Authenticate"))
		}
	}
	if n := r.sendCount(t); n != before {
		t.Errorf("refused requests stored %d events", n-before)
	}
	// What a sender needs to send right takes either scope.
	if a := r.do(t, http.MethodGet, restapi.PathTypes, sendOnly, nil); a.status != http.StatusOK {
		t.Errorf("types with a send-only PAT: %s", a)
	}
	if a := r.do(t, http.MethodGet, restapi.PathTypes, readOnly, nil); a.status != http.StatusOK {
		t.Errorf("types with a read-only PAT: %s", a)
	}
	for name, c := range map[string]struct {
		token, code string
		status      int
	}{
		"no credential":     {"", restapi.CodeAuthRequired, http.StatusUnauthorized},
		"a forged PAT":      {"alppat_AAAAAAAAAAAAAAAAAAAAAAAAAA_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA", restapi.CodeInvalidToken, http.StatusUnauthorized},
		"a malformed token": {"not-a-token", restapi.CodeInvalidToken, http.StatusUnauthorized},
	} {
		a := r.do(t, http.MethodGet, restapi.PathTypes, c.token, nil)
		if a.status != c.status || a.code() != c.code || !strings.Contains(a.header.Get("WWW-Authenticate"), "resource_metadata=") {
			t.Errorf("%s: %s %q", name, a, a.header.Get("WWW-Authenticate"))
		}
	}
}

// The sender is the credential's: a request naming another is refused
// and stores nothing; naming one's own address (in any case) is fine.
func TestSenderMismatch(t *testing.T) {
	r := newRig(t, restapi.Config{})
	before := r.sendCount(t)
	forged := send("bo@example.org")
	forged["from"] = "bo@example.org"
	a := r.do(t, http.MethodPost, restapi.PathMessages, r.anaPAT, forged)
	if a.status != http.StatusForbidden || a.code() != restapi.CodeSenderMismatch || a.json(t)["pointer"] != "/from" ||
		!strings.Contains(a.json(t)["detail"].(string), "ana@example.org") {
		t.Errorf("a forged sender: %s", a)
	}
	conn := map[string]any{"to": "cy@partner.example", "purpose": "meeting", "from": "acct:cy@partner.example"}
	if a := r.do(t, http.MethodPost, restapi.PathConnections, r.anaPAT, conn); a.code() != restapi.CodeSenderMismatch {
		t.Errorf("a forged requester: %s", a)
	}
	if n := r.sendCount(t); n != before {
		t.Errorf("forged senders stored %d events", n-before)
	}
	own := send("bo@example.org")
	own["from"] = "acct:Ana@Example.org"
	if a := r.do(t, http.MethodPost, restapi.PathMessages, r.anaPAT, own); a.status >= 300 {
		t.Errorf("naming one's own address: %s", a)
	}
}

// Bad input: a clear problem with a stable code and the member's pointer,
// nothing stored.
func TestBadInput(t *testing.T) {
	r := newRig(t, restapi.Config{})
	before := r.sendCount(t)
	unknownType := send("bo@example.org")
	unknownType["type"] = "nope/v1"
	badBody := send("bo@example.org")
	badBody["body"] = map[string]any{"subject": "x", "start": "tomorrow", "duration": "PT30M", "attendees": []string{"bo@example.org"}}
	for _, c := range []struct {
		name        string
		body        any
		header      []string
		status      int
		code, ptr   string
		hasProblems bool
	}{
		{"unknown type", unknownType, nil, 422, restapi.CodeUnknownMessageType, "/type", false},
		{"body failing its schema", badBody, nil, 422, restapi.CodeInvalidBody, "/body/start", true},
		{"not JSON", `{"to":`, nil, 400, restapi.CodeInvalidRequest, "", false},
		{"an array", `[1]`, nil, 400, restapi.CodeInvalidRequest, "", false},
		{"an unknown member", `{"to":"bo@example.org","type":"note/v1","body":{},"cc":"x"}`, nil, 400, restapi.CodeInvalidRequest, "/cc", false},
		{"a member of the wrong type", `{"to":5,"type":"note/v1","body":{}}`, nil, 400, restapi.CodeInvalidRequest, "/to", false},
		{"no recipient", `{"type":"note/v1","body":{}}`, nil, 400, restapi.CodeInvalidRequest, "/to", false},
		{"a bad recipient", `{"to":"bo","type":"note/v1","body":{}}`, nil, 400, restapi.CodeInvalidRequest, "/to", false},
		{"a body that is no object", `{"to":"bo@example.org","type":"note/v1","body":"hi"}`, nil, 400, restapi.CodeInvalidRequest, "/body", false},
		{"a bad in_reply_to", `{"to":"bo@example.org","type":"note/v1","body":{"text":"hi"},"in_reply_to":"x"}`, nil, 400, restapi.CodeInvalidRequest, "/in_reply_to", false},
		{"trailing data", `{"to":"bo@example.org","type":"note/v1","body":{}} {}`, nil, 400, restapi.CodeInvalidRequest, "", false},
		{"another media type", `{}`, []string{"Content-Type", "text/plain"}, 415, restapi.CodeUnsupportedMediaType, "", false},
		{"too large", `{"to":"` + strings.Repeat("a", 300<<10) + `"}`, nil, 413, restapi.CodeBodyTooLarge, "", false},
	} {
		a := r.do(t, http.MethodPost, restapi.PathMessages, r.anaPAT, c.body, c.header...)
		p := a.json(t)
		ptr, _ := p["pointer"].(string)
		if a.status != c.status || a.code() != c.code || ptr != c.ptr || (p["problems"] != nil) != c.hasProblems ||
			a.header.Get("Content-Type") != "application/problem+json" {
			t.Errorf("%s: %s", c.name, a)
		}
	}
	if n := r.sendCount(t); n != before {
		t.Errorf("bad input stored %d events", n-before)
	}
}

// The door's rate limits answer 429 with Retry-After, in the header and
// the problem.
func TestRateLimited(t *testing.T) {
	r := newRigWith(t, broker.Config{Door: ingress.DoorConfig{PerAgent: ingressRate(0.01, 2)}})
	for range 2 {
		if a := r.do(t, http.MethodGet, restapi.PathTypes, r.anaPAT, nil); a.status != http.StatusOK {
			t.Fatal(a)
		}
	}
	a := r.do(t, http.MethodGet, restapi.PathTypes, r.anaPAT, nil)
	if a.status != http.StatusTooManyRequests || a.code() != restapi.CodeRateLimited || a.header.Get("Retry-After") == "" ||
		a.json(t)["retry_after"] == nil {
		t.Errorf("over the rate: %s %v", a, a.header)
	}
	// Another agent of another person has its own budget.
	if a := r.do(t, http.MethodGet, restapi.PathTypes, r.bo.Token, nil); a.status != http.StatusOK {
		t.Errorf("bo after ana's limit: %s", a)
	}
}

// Unknown paths and methods are problems too.
func TestFallbacks(t *testing.T) {
	r := newRig(t, restapi.Config{})
	if a := r.do(t, http.MethodGet, "/v1/agent/nope", r.anaPAT, nil); a.status != http.StatusNotFound || a.code() != restapi.CodeNotFound {
		t.Errorf("an unknown path: %s", a)
	}
	a := r.do(t, http.MethodDelete, restapi.PathMessages, r.anaPAT, nil)
	if a.status != http.StatusMethodNotAllowed || a.code() != restapi.CodeMethodNotAllowed || a.header.Get("Allow") != "POST" {
		t.Errorf("DELETE messages: %s %v", a, a.header)
	}
}

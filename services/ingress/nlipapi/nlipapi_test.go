package nlipapi_test

import (
	"bytes"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	nmpv1 "github.com/alpd-project/alpd/gen/alp/nmp/v1"
	alpv1 "github.com/alpd-project/alpd/gen/alp/v1"
	"github.com/alpd-project/alpd/internal/accesstoken"
	"github.com/alpd-project/alpd/internal/envelope"
	"github.com/alpd-project/alpd/internal/nlip"
	"github.com/alpd-project/alpd/internal/nmp"
	"github.com/alpd-project/alpd/internal/testkit"
	"github.com/alpd-project/alpd/services/ingress"
	"github.com/alpd-project/alpd/services/ingress/nlipapi"
)

func TestSendAnswersWithThePolicyOutcome(t *testing.T) {
	r := newRig(t, rigOptions{})
	body := sendJSON("bo@other.example",
		`{"format":"token","subformat":"conversation","content":"conv-123"}`,
		`{"format":"token","subformat":"authorization","content":"secret-nlip-auth-token"}`,
		`{"label":"ag2_context","format":"structured","subformat":"JSON","content":{"k":"v"}}`)
	resp, reply := r.post(t, "/nlip/", r.token, "application/json", body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d: %+v", resp.StatusCode, reply)
	}
	res := result(t, reply)
	if res["outcome"] != "refuse" || res["to"] != "bo@other.example" || res["type"] != "meeting.request/v1" {
		t.Errorf("result %v", res)
	}
	// Bo is at another broker and a stranger to Ana: the hard rule.
	reasons, _ := res["reasons"].([]any)
	if len(reasons) != 1 || reasons[0].(map[string]any)["party"] != "broker" || reasons[0].(map[string]any)["code"] != "stranger" {
		t.Errorf("reasons %v", res["reasons"])
	}
	text, _ := reply.Content.Text()
	if !strings.Contains(text, "refused") || !strings.Contains(text, res["envelope_id"].(string)) {
		t.Errorf("reply text %q", text)
	}
	// ECMA-430 §6.2: every token comes back unchanged, to the same agent.
	var echoed []string
	for _, sm := range reply.Submessages {
		if sm.Format == "token" {
			c, _ := sm.Content.Text()
			echoed = append(echoed, sm.Subformat+"="+c)
		}
	}
	if strings.Join(echoed, ",") != "conversation=conv-123,authorization=secret-nlip-auth-token" {
		t.Errorf("echoed tokens %v", echoed)
	}

	// The event: from the credential, body and NLIP parts sealed, no token.
	ev := r.lastSend(t, res["envelope_id"].(string))
	env := ev.GetSendRequested().GetEnvelope()
	if env.GetFrom() != "ana@example.org" || env.GetFromAgent() != "agent-1" || len(env.GetBody()) != 0 || env.GetSealedBody() == nil {
		t.Errorf("envelope from=%q agent=%q body=%q sealed=%v", env.GetFrom(), env.GetFromAgent(), env.GetBody(), env.GetSealedBody() != nil)
	}
	h := envelope.NLIP(env)
	if h.GetMessagetype() != "alp:meeting.request/v1" || h.GetParts() != nil || h.GetSealedParts() == nil {
		t.Errorf("NLIP header %v", h)
	}
	if got := strings.Join(h.GetLabels(), ","); got != "alp.to,alp.body,,ag2_context" {
		t.Errorf("labels %q", got)
	}
	if got := envelope.NMP(env).GetTrust(); got != nmpv1.TrustLevel_TRUST_LEVEL_VERIFIED {
		t.Errorf("trust %v, want verified (consumer agent)", got)
	}
	all := r.streamBytes(t)
	for _, secret := range []string{"secret-nlip-auth-token", r.token, "conv-123", "Planning"} {
		if bytes.Contains(all, []byte(secret)) {
			t.Errorf("%q reached NATS", secret)
		}
	}
}

func TestBothPathsAnswerWithoutRedirect(t *testing.T) {
	r := newRig(t, rigOptions{})
	for _, path := range []string{"/nlip", "/nlip/"} {
		resp, reply := r.post(t, path, r.token, "application/json; charset=utf-8", sendJSON("bo@other.example"))
		if resp.StatusCode != http.StatusOK {
			t.Errorf("%s: %d %+v", path, resp.StatusCode, reply)
		}
	}
}

func TestErrorsAreNLIPWithTheirStatus(t *testing.T) {
	r := newRig(t, rigOptions{nlip: nlipapi.Config{Message: nlip.Limits{MaxMessageBytes: 4096}}})
	readOnly := r.mint(t, "agent-ro", accesstoken.ClassConsumer, "alp.read")
	before := r.sendCount(t)
	cases := []struct {
		name, path, token, contentType string
		body                           []byte
		status                         int
		code                           string
	}{
		{"malformed JSON", "/nlip/", r.token, "application/json", []byte(`{"format":`), 400, "nlip_malformed"},
		{"no format", "/nlip/", r.token, "application/json", []byte(`{"subformat":"english","content":"x"}`), 400, "nlip_missing_field"},
		// A value that is not JSON where a string belongs is malformed,
		// not of the wrong type (issue 13, nlip-project's clients).
		{"bare word in a string field", "/nlip/", r.token, "application/json", []byte(`{"format": x}`), 400, "nlip_malformed"},
		{"number in a string field", "/nlip/", r.token, "application/json", []byte(`{"format": 1, "subformat":"english","content":"x"}`), 400, "nlip_invalid_type"},
		{"no token", "/nlip/", "", "application/json", sendJSON("bo@other.example"), 401, "authentication_required"},
		{"forged token", "/nlip/", r.token[:len(r.token)-4] + "AAAA", "application/json", sendJSON("bo@other.example"), 401, "invalid_token"},
		{"no send scope", "/nlip/", readOnly, "application/json", sendJSON("bo@other.example"), 403, "insufficient_scope"},
		{"too large", "/nlip/", r.token, "application/json", bytes.Repeat([]byte(" "), 5000), 413, "too_large"},
		{"wrong content type", "/nlip/", r.token, "text/plain", sendJSON("bo@other.example"), 415, "unsupported_media_type"},
		{"no content type", "/nlip/", r.token, "", sendJSON("bo@other.example"), 415, "unsupported_media_type"},
		{"alp parts without alp messagetype", "/nlip/", r.token, "application/json",
			[]byte(`{"format":"text","subformat":"english","content":"hi","submessages":[{"label":"alp.to","format":"structured","subformat":"uri","content":"acct:bo@other.example"}]}`),
			422, "not_an_alp_send"},
		{"no recipient", "/nlip/", r.token, "application/json",
			[]byte(`{"messagetype":"alp:note/v1","format":"text","subformat":"english","content":"x","submessages":[{"label":"alp.body","format":"structured","subformat":"json","content":{}}]}`),
			400, "invalid_alp_message"},
		{"bad recipient", "/nlip/", r.token, "application/json", sendJSON("not-an-address"), 400, "invalid_alp_message"},
		{"unknown path", "/nlip/other", r.token, "application/json", sendJSON("bo@other.example"), 404, "not_found"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			resp, reply := r.post(t, c.path, c.token, c.contentType, c.body)
			if resp.StatusCode != c.status {
				t.Fatalf("status %d, want %d: %+v", resp.StatusCode, c.status, reply)
			}
			e := apiError(t, reply)
			if code, _ := e["code"].(string); code != c.code {
				t.Errorf("code %q, want %q", code, c.code)
			}
			if text, _ := reply.Content.Text(); text == "" || reply.Subformat != "english" {
				t.Errorf("no English text: %+v", reply)
			}
			if c.status == 401 || c.status == 403 {
				if ch := resp.Header.Get("WWW-Authenticate"); !strings.Contains(ch, `resource_metadata="`+publicURL+`/.well-known/oauth-protected-resource"`) {
					t.Errorf("WWW-Authenticate %q", ch)
				}
			}
		})
	}
	if after := r.sendCount(t); after != before {
		t.Errorf("rejected requests wrote %d events", after-before)
	}
}

func TestRateLimitPerAgent(t *testing.T) {
	r := newRig(t, rigOptions{door: ingress.DoorConfig{PerAgent: ingress.Rate{Limit: 0.01, Burst: 2}}})
	for i := range 2 {
		if resp, reply := r.post(t, "/nlip/", r.token, "application/json", sendJSON("bo@other.example")); resp.StatusCode != 200 {
			t.Fatalf("request %d: %d %+v", i, resp.StatusCode, reply)
		}
	}
	resp, reply := r.post(t, "/nlip/", r.token, "application/json", sendJSON("bo@other.example"))
	if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("third request: %d Retry-After=%q", resp.StatusCode, resp.Header.Get("Retry-After"))
	}
	if e := apiError(t, reply); e["code"] != "rate_limited" {
		t.Errorf("error %v", e)
	}
	// Another agent of the same person has its own bucket.
	other := r.mint(t, "agent-2", accesstoken.ClassConsumer, "alp.send")
	if resp, _ := r.post(t, "/nlip/", other, "application/json", sendJSON("bo@other.example")); resp.StatusCode != 200 {
		t.Errorf("other agent: %d", resp.StatusCode)
	}
}

// countingBody counts what the handler reads.
type countingBody struct {
	n    int
	data []byte
}

func (c *countingBody) Read(p []byte) (int, error) {
	if len(c.data) == 0 {
		return 0, ioEOF
	}
	n := copy(p, c.data)
	c.data = c.data[n:]
	c.n += n
	return n, nil
}
func (c *countingBody) Close() error { return nil }

func TestOversizeBodyIsNotReadWhole(t *testing.T) {
	r := newRig(t, rigOptions{nlip: nlipapi.Config{Message: nlip.Limits{MaxMessageBytes: 4096}}})
	h := r.b.Handler()
	for _, announced := range []bool{true, false} {
		body := &countingBody{data: bytes.Repeat([]byte("x"), 1<<20)}
		req := newRequest(t, "/nlip/", body, r.token)
		if announced {
			req.ContentLength = 1 << 20
		} else {
			req.ContentLength = -1 // chunked: the size is found while reading
		}
		w := newRecorder()
		h.ServeHTTP(w, req)
		if w.Code != http.StatusRequestEntityTooLarge {
			t.Fatalf("announced=%v: status %d", announced, w.Code)
		}
		if announced && body.n != 0 {
			t.Errorf("an announced oversize body was read (%d bytes)", body.n)
		}
		if !announced && body.n > 4096+32*1024 {
			t.Errorf("read %d bytes of an oversize chunked body", body.n)
		}
	}
}

func TestIdempotencyKey(t *testing.T) {
	r := newRig(t, rigOptions{})
	key := `{"format":"token","subformat":"idempotency","content":"k-42"}`
	_, first := r.post(t, "/nlip/", r.token, "application/json", sendJSON("bo@other.example", key))
	_, again := r.post(t, "/nlip/", r.token, "application/json", sendJSON("bo@other.example", key))
	a, b := result(t, first), result(t, again)
	if a["envelope_id"] != b["envelope_id"] || a["duplicate"] != nil || b["duplicate"] != true {
		t.Fatalf("first %v, retry %v", a, b)
	}
	// The HTTP header names the same key.
	_, viaHeader := r.post(t, "/nlip/", r.token, "application/json", sendJSON("bo@other.example"), "Idempotency-Key", "k-42")
	if c := result(t, viaHeader); c["envelope_id"] != a["envelope_id"] {
		t.Errorf("header key gave %v", c["envelope_id"])
	}
	if n := r.sendCount(t); n != 1 {
		t.Errorf("%d SendRequested events, want 1", n)
	}
	// The same key for another message is refused.
	resp, reply := r.post(t, "/nlip/", r.token, "application/json", sendJSON("cy@other.example", key))
	if resp.StatusCode != http.StatusUnprocessableEntity || apiError(t, reply)["code"] != "idempotency_key_reused" {
		t.Errorf("reused key: %d %+v", resp.StatusCode, reply)
	}
	// Keys are per agent: another agent's k-42 is another envelope.
	other := r.mint(t, "agent-2", accesstoken.ClassConsumer, "alp.send")
	_, third := r.post(t, "/nlip/", other, "application/json", sendJSON("bo@other.example", key))
	if c := result(t, third); c["envelope_id"] == a["envelope_id"] {
		t.Error("two agents' keys made one envelope")
	}
}

func TestAgentNMPHeaderCanOnlyLower(t *testing.T) {
	r := newRig(t, rigOptions{})
	company := r.mint(t, "agent-co", accesstoken.ClassCompany, "alp.send")
	lower := `{"label":"nmp","format":"structured","subformat":"json","content":{"nmp_message":{"trust":{"level":1},"budget":{"max_tokens":5000,"tokens_used":0,"system_mode":"standard"}}}}`
	_, reply := r.post(t, "/nlip/", company, "application/json", sendJSON("bo@other.example", lower))
	env := r.lastSend(t, result(t, reply)["envelope_id"].(string)).GetSendRequested().GetEnvelope()
	h := envelope.NMP(env)
	if h.GetTrust() != nmpv1.TrustLevel_TRUST_LEVEL_UNTRUSTED || h.GetBudget().GetMaxTokens() != 5000 {
		t.Errorf("trust %v budget %v, want untrusted and 5000", h.GetTrust(), h.GetBudget())
	}
	raise := `{"label":"nmp","format":"structured","subformat":"json","content":{"nmp_message":{"trust":{"level":3}}}}`
	_, reply = r.post(t, "/nlip/", r.token, "application/json", sendJSON("bo@other.example", raise))
	res := result(t, reply)
	env = r.lastSend(t, res["envelope_id"].(string)).GetSendRequested().GetEnvelope()
	if got := envelope.NMP(env).GetTrust(); got != nmpv1.TrustLevel_TRUST_LEVEL_VERIFIED {
		t.Errorf("a consumer agent raised trust to %v", got)
	}
	if ignored, _ := res["nmp_ignored"].([]any); len(ignored) == 0 {
		t.Errorf("the raise was not reported as ignored: %v", res)
	}
	bad := `{"label":"nmp","format":"structured","subformat":"json","content":{"nmp_message":{"signals":{"urgency":1.5}}}}`
	resp, reply := r.post(t, "/nlip/", r.token, "application/json", sendJSON("bo@other.example", bad))
	if resp.StatusCode != 400 || !strings.HasPrefix(apiError(t, reply)["code"].(string), "nmp_") {
		t.Errorf("out-of-range signal: %d %+v", resp.StatusCode, reply)
	}
}

func TestPendingThenPoll(t *testing.T) {
	// Without policy nothing decides: the send answers pending. (Its
	// stream exists: ingress follows the message types on it.)
	r := newRig(t, rigOptions{services: []string{"identity", "ingress"}, door: ingress.DoorConfig{DecisionWait: 50 * time.Millisecond},
		streamsOf: []alpv1.Role{alpv1.Role_ROLE_POLICY, alpv1.Role_ROLE_APPROVALS}})
	resp, reply := r.post(t, "/nlip/", r.token, "application/json", sendJSON("bo@other.example"))
	res := result(t, reply)
	if resp.StatusCode != http.StatusAccepted || res["outcome"] != "pending" || res["poll"] != publicURL+"/nlip/envelopes/"+res["envelope_id"].(string) {
		t.Fatalf("%d %v", resp.StatusCode, res)
	}
	poll := func(id, token string) (*http.Response, *nlip.Message) {
		req, _ := http.NewRequest(http.MethodGet, r.srv.URL+"/nlip/envelopes/"+id, nil)
		req.Header.Set("Authorization", "Bearer "+token)
		return r.do(t, req)
	}
	if resp, reply := poll(res["envelope_id"].(string), r.token); resp.StatusCode != http.StatusAccepted || result(t, reply)["outcome"] != "pending" {
		t.Errorf("poll: %d %+v", resp.StatusCode, reply)
	}
	if resp, reply := poll("01900000-0000-7000-8000-000000000000", r.token); resp.StatusCode != http.StatusNotFound || apiError(t, reply)["code"] != "unknown_envelope" {
		t.Errorf("unknown envelope: %d", resp.StatusCode)
	}
	if resp, _ := poll(res["envelope_id"].(string), ""); resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("poll without token: %d", resp.StatusCode)
	}
}

func TestControlMessageGetsControlReply(t *testing.T) {
	r := newRig(t, rigOptions{})
	resp, reply := r.post(t, "/nlip/", r.token, "application/json",
		[]byte(`{"MessageType":"Control","Format":"text","Subformat":"English","Content":"what can you do?"}`))
	if resp.StatusCode != 200 || !reply.IsControl() {
		t.Fatalf("%d %+v", resp.StatusCode, reply)
	}
	if _, ok := reply.FindLabel("alp.capabilities"); !ok {
		t.Error("no capabilities")
	}
}

func TestCBOROverHTTP(t *testing.T) {
	r := newRig(t, rigOptions{})
	m, err := nlip.DecodeJSON(sendJSON("bo@other.example"), nlip.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	data, err := nlip.EncodeCBOR(m)
	if err != nil {
		t.Fatal(err)
	}
	resp, reply := r.post(t, "/nlip/", r.token, "application/cbor", data)
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "application/cbor" || result(t, reply)["outcome"] != "refuse" {
		t.Errorf("%d %s %+v", resp.StatusCode, resp.Header.Get("Content-Type"), reply)
	}
}

// TestEnvelopeTooLargeForNATSIsRefused: a message under the NLIP size limit
// whose stored event would not fit in one NATS message can never be
// stored, so it is refused with 413 envelope_too_large (not 503 "retry"),
// and logged without its content (issue 10, finding 8).
func TestEnvelopeTooLargeForNATSIsRefused(t *testing.T) {
	logs := &testkit.LockedBuffer{}
	r := newRig(t, rigOptions{log: slog.New(slog.NewJSONHandler(logs, nil))})
	// 1e20 is 4 characters as sent and 21 in canonical JSON (RFC 8785 writes
	// numbers out), so ~220 KB grows to ~950 KB per content value, each
	// under the content limit; two of them exceed NATS's 1 MiB. The typed
	// body itself is small and valid: the NLIP parts are what is stored too.
	numbers := strings.Repeat("1e20,", 45000) + "1"
	body := []byte(`{"messagetype":"alp:note/v1","format":"text","subformat":"english","content":"hi","submessages":[` +
		`{"label":"alp.to","format":"structured","subformat":"uri","content":"acct:bo@other.example"},` +
		`{"label":"alp.body","format":"structured","subformat":"json","content":{"text":"secret-title-4711"}},` +
		`{"label":"bulk","format":"structured","subformat":"json","content":[` + numbers + `]},` +
		`{"label":"bulk2","format":"structured","subformat":"json","content":[` + numbers + `]},` + convToken + `,` + authToken + `]}`)
	if len(body) >= 1<<20 {
		t.Fatalf("the request is %d bytes: it must be under the NLIP limit", len(body))
	}
	before := r.sendCount(t)
	resp, reply := r.post(t, "/nlip/", r.token, "application/json", body, "Idempotency-Key", "big-1")
	if e := apiError(t, reply); resp.StatusCode != http.StatusRequestEntityTooLarge || e["code"] != "envelope_too_large" ||
		resp.Header.Get("Retry-After") != "" || strings.Contains(e["message"].(string), "retry") {
		t.Fatalf("%d %v (Retry-After %q), want 413 envelope_too_large without retry advice", resp.StatusCode, e, resp.Header.Get("Retry-After"))
	}
	echoed(t, reply)
	if n := r.sendCount(t); n != before {
		t.Errorf("%d events stored", n-before)
	}
	log := logs.String()
	if !strings.Contains(log, "envelope too large") || !strings.Contains(log, `"agent":"agent-1"`) || !strings.Contains(log, `"tenant":"example.org"`) {
		t.Errorf("no warning naming the agent and tenant was logged:\n%.2000s", log)
	}
	if strings.Contains(log, "secret-title-4711") || strings.Contains(log, "100000000000000000000") {
		t.Error("the log holds the message's content")
	}
}

// TestAgentNMPTraceTextStaysOffTheStreams: the agent and action strings of
// an agent's NMP trace are its own free text, which must not go onto the
// streams in the clear (NMP headers are never sealed, so they would outlive
// erasure); and the agent's entries follow ingress's own (issue 10,
// finding 7).
func TestAgentNMPTraceTextStaysOffTheStreams(t *testing.T) {
	r := newRig(t, rigOptions{})
	part := `{"label":"nmp","format":"structured","subformat":"json","content":{"nmp_message":{"trace":[` +
		`{"agent":"router-of-ana-private","action":"summarised the diary of ana","tokens":42},{"agent":"planner-x","tokens":8}]}}}`
	resp, reply := r.post(t, "/nlip/", r.token, "application/json", sendJSON("bo@other.example", part))
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("%d %+v", resp.StatusCode, reply)
	}
	env := r.lastSend(t, result(t, reply)["envelope_id"].(string)).GetSendRequested().GetEnvelope()
	h := envelope.NMP(env)
	tr := h.GetTrace()
	if len(tr) != 3 || tr[0].GetService() != "ingress" ||
		tr[1].GetService() != nmp.AgentService || tr[1].GetAction() != "" || tr[1].GetTokens() != 42 ||
		tr[2].GetService() != nmp.AgentService || tr[2].GetTokens() != 8 || h.GetBudget().GetTokensUsed() != 50 {
		t.Errorf("trace %v, want ingress first, then the agent's two entries without their text", tr)
	}
	all := r.streamBytes(t)
	for _, s := range []string{"router-of-ana-private", "summarised the diary", "planner-x"} {
		if bytes.Contains(all, []byte(s)) {
			t.Errorf("%q is on a stream in the clear", s)
		}
	}
}

// TestIdempotencyKeyStoredOnlyAsKeyedDigest: the agent's idempotency key
// is not stored, and the envelope id derived from it cannot be recomputed
// from the key without the sender's data key (issue 10, finding 12).
func TestIdempotencyKeyStoredOnlyAsKeyedDigest(t *testing.T) {
	r := newRig(t, rigOptions{})
	const key = "ik-clear-4711"
	resp, reply := r.post(t, "/nlip/", r.token, "application/json", sendJSON("bo@other.example"), "Idempotency-Key", key)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("%d %+v", resp.StatusCode, reply)
	}
	id := result(t, reply)["envelope_id"].(string)
	sr := r.lastSend(t, id).GetSendRequested()
	if sr.GetIdempotencyKey() != "" || len(sr.GetIdempotencyKeyDigest()) != 32 || len(sr.GetRequestDigest()) != 32 {
		t.Errorf("SendRequested key %q, key digest %x, request digest %x: want no key and two 32-byte digests",
			sr.GetIdempotencyKey(), sr.GetIdempotencyKeyDigest(), sr.GetRequestDigest())
	}
	if bytes.Contains(r.streamBytes(t), []byte(key)) {
		t.Error("the idempotency key is on a stream in the clear")
	}
	// The id used to be a plain name-based UUID of (tenant, agent, key).
	unkeyed := uuid.NewSHA1(uuid.MustParse("6f1d3c2a-4b5e-4f60-8a7b-9c0d1e2f3a4b"), []byte(tenant+"\x00agent-1\x00"+key)).String()
	if id == unkeyed {
		t.Error("the envelope id is an unkeyed hash of the idempotency key")
	}
}

// TestIdempotencyKeyWithAnotherBodyIsRefused: a retry must repeat the
// request; the same key for the same recipient and type but another body
// is refused with 422 idempotency_body_mismatch, and nothing is stored
// (issue 10, finding 12).
func TestIdempotencyKeyWithAnotherBodyIsRefused(t *testing.T) {
	r := newRig(t, rigOptions{})
	send := func(body string) []byte {
		return []byte(`{"messagetype":"alp:priorities.request/v1","format":"text","subformat":"english","content":"hi","submessages":[` +
			`{"label":"alp.to","format":"structured","subformat":"uri","content":"acct:bo@other.example"},` +
			`{"label":"alp.body","format":"structured","subformat":"json","content":` + body + `}]}`)
	}
	_, first := r.post(t, "/nlip/", r.token, "application/json", send(`{"horizon":"week","max_items":5}`), "Idempotency-Key", "k-body")
	id := result(t, first)["envelope_id"]
	// The same body written differently is the same request (canonical JSON).
	resp, again := r.post(t, "/nlip/", r.token, "application/json", send(`{ "max_items": 5.0, "horizon": "week" }`), "Idempotency-Key", "k-body")
	if res := result(t, again); resp.StatusCode != http.StatusOK || res["envelope_id"] != id || res["duplicate"] != true {
		t.Errorf("identical retry: %d %v", resp.StatusCode, res)
	}
	before := r.sendCount(t)
	resp, other := r.post(t, "/nlip/", r.token, "application/json", send(`{"horizon":"week","max_items":6}`), "Idempotency-Key", "k-body")
	if e := apiError(t, other); resp.StatusCode != http.StatusUnprocessableEntity || e["code"] != "idempotency_body_mismatch" {
		t.Errorf("another body under the same key: %d %v", resp.StatusCode, e)
	}
	if n := r.sendCount(t); n != before {
		t.Errorf("%d events stored for the refused retry", n-before)
	}
}

// TestBodiesRefusedAtTheDoor: an unknown message type and a body its type
// refuses are answered 422 in the NLIP error shape — the code, the part of
// the message at fault, and for a body every failure's pointer into the
// body and failing keyword — and nothing is stored.
func TestBodiesRefusedAtTheDoor(t *testing.T) {
	r := newRig(t, rigOptions{})
	before := r.sendCount(t)
	send := func(typ, body string) []byte {
		return []byte(`{"messagetype":"alp:` + typ + `","format":"text","subformat":"english","content":"hi","submessages":[` +
			`{"label":"alp.to","format":"structured","subformat":"uri","content":"acct:bo@other.example"},` +
			`{"label":"alp.body","format":"structured","subformat":"json","content":` + body + `}]}`)
	}
	resp, reply := r.post(t, "/nlip/", r.token, "application/json", send("meeting.proposal/v1", meetingBody))
	e := apiError(t, reply)
	if resp.StatusCode != http.StatusUnprocessableEntity || e["code"] != "unknown_message_type" || e["pointer"] != "/messagetype" ||
		!strings.Contains(e["message"].(string), `"meeting.proposal/v1"`) {
		t.Errorf("unknown type: %d %v", resp.StatusCode, e)
	}
	resp, reply = r.post(t, "/nlip/", r.token, "application/json",
		send("meeting.request/v1", `{"subject":"Planning","start":"2026-12-03 10:00","attendees":[],"room":"4711"}`))
	e = apiError(t, reply)
	if resp.StatusCode != http.StatusUnprocessableEntity || e["code"] != "invalid_body" || e["pointer"] != "/submessages/1/content" {
		t.Fatalf("invalid body: %d %v", resp.StatusCode, e)
	}
	var got []string
	problems, _ := e["problems"].([]any)
	for _, f := range problems {
		m := f.(map[string]any)
		if m["message"] == "" {
			t.Errorf("failure without a message: %v", m)
		}
		got = append(got, m["pointer"].(string)+" "+m["keyword"].(string))
	}
	want := []string{" additionalProperties", " required", "/attendees minItems", "/start format"}
	if !slices.Equal(got, want) {
		t.Errorf("failures %v, want %v", got, want)
	}
	if text, _ := reply.Content.Text(); !strings.Contains(text, "meeting.request/v1") || !strings.Contains(text, "(and 1 more)") {
		t.Errorf("English text %q", text)
	}
	if n := r.sendCount(t); n != before {
		t.Errorf("%d events stored for refused bodies", n-before)
	}
}

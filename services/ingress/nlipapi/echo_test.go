package nlipapi_test

import (
	"bytes"
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/coder/websocket"
	"github.com/fxamacker/cbor/v2"

	"github.com/alpd-project/alpd/internal/accesstoken"
	"github.com/alpd-project/alpd/internal/nlip"
	"github.com/alpd-project/alpd/services/ingress"
)

// The tokens every request of these tests carries (ECMA-430 §6.2: a
// conversation token and an authentication token, which must both come
// back in every response).
const (
	convToken = `{"format":"token","subformat":"conversation","content":"conv-7"}`
	authToken = `{"label":"who","format":"token","subformat":"authentication","content":"nlip-auth-7"}`
)

var wantTokens = []string{"conversation=conv-7", "authentication=nlip-auth-7"}

// tokens lists a reply's token parts as subformat=content.
func tokens(m *nlip.Message) []string {
	var out []string
	for _, t := range m.Tokens() {
		c, _ := t.Content.Text()
		out = append(out, t.Subformat+"="+c)
	}
	return out
}

// nlipJSON is an NLIP message with the test tokens among its submessages.
func nlipJSON(messagetype, firstSubs string, lastSubs ...string) []byte {
	subs := []string{}
	if firstSubs != "" {
		subs = append(subs, firstSubs)
	}
	subs = append(subs, convToken, authToken)
	subs = append(subs, lastSubs...)
	mt := ""
	if messagetype != "" {
		mt = `"messagetype":"` + messagetype + `",`
	}
	return []byte(`{` + mt + `"format":"text","subformat":"english","content":"hi","submessages":[` + strings.Join(subs, ",") + `]}`)
}

// TestEveryHTTPAnswerEchoesTheTokens: ECMA-430 §6.2 wants the request's
// token submessages back in every response, errors included (issue 13:
// only sends and control replies had them). Each refusal the HTTP binding
// can give a readable message, and the successes, carry them; a body that
// cannot be read as NLIP has none to give.
func TestEveryHTTPAnswerEchoesTheTokens(t *testing.T) {
	r := newRig(t, rigOptions{})
	readOnly := r.mint(t, "agent-ro", accesstoken.ClassConsumer, "alp.read")
	to := `{"label":"alp.to","format":"structured","subformat":"uri","content":"acct:bo@other.example"}`
	body := func(content string) string {
		return `{"label":"alp.body","format":"structured","subformat":"json","content":` + content + `}`
	}
	send := func(typ string, extra ...string) []byte {
		return nlipJSON("alp:"+typ, to, append([]string{body(meetingBody)}, extra...)...)
	}
	// The first send with this key; the table reuses it for another type.
	if resp, reply := r.post(t, "/nlip/", r.token, "application/json", send("meeting.request/v1"), "Idempotency-Key", "k-echo"); resp.StatusCode != 200 {
		t.Fatalf("first send: %d %+v", resp.StatusCode, reply)
	}
	cases := []struct {
		name, method, path, token, contentType string
		body                                   []byte
		status                                 int
		code                                   string
		header                                 []string
	}{
		{"sent", "POST", "/nlip/", r.token, "application/json", send("meeting.request/v1"), 200, "", nil},
		{"plain text", "POST", "/nlip", r.token, "application/json", nlipJSON("", ""), 200, "", nil},
		{"control", "POST", "/nlip/", r.token, "application/json", nlipJSON("control", ""), 200, "", nil},

		{"malformed after the tokens", "POST", "/nlip/", r.token, "application/json", nlipJSON("", "", `{"format": x}`), 400, "nlip_malformed", nil},
		{"invalid NLIP after the tokens", "POST", "/nlip/", r.token, "application/json", nlipJSON("", "", `{"format":"text","subformat":"english","content":1}`), 400, "nlip_invalid_content", nil},
		{"invalid top level", "POST", "/nlip/", r.token, "application/json",
			[]byte(`{"format":"nonsense","subformat":"english","content":"hi","submessages":[` + convToken + "," + authToken + `]}`), 400, "nlip_unknown_format", nil},
		{"no recipient", "POST", "/nlip/", r.token, "application/json", nlipJSON("alp:meeting.request/v1", body(meetingBody)), 400, "invalid_alp_message", nil},
		{"bad message type", "POST", "/nlip/", r.token, "application/json", nlipJSON("alp: spaced", to, body(meetingBody)), 400, "invalid_alp_message", nil},
		{"two idempotency keys", "POST", "/nlip/", r.token, "application/json",
			send("meeting.request/v1", `{"format":"token","subformat":"idempotency","content":"a"}`, `{"format":"token","subformat":"idempotency","content":"b"}`), 400, "invalid_idempotency_key", nil},
		{"bad NMP header", "POST", "/nlip/", r.token, "application/json",
			send("meeting.request/v1", `{"label":"nmp","format":"structured","subformat":"json","content":{"nmp_message":{"signals":{"urgency":7}}}}`), 400, "nmp_", nil},
		{"no credential", "POST", "/nlip/", "", "application/json", send("meeting.request/v1"), 401, "authentication_required", nil},
		{"forged credential", "POST", "/nlip/", r.token[:len(r.token)-4] + "AAAA", "application/json", send("meeting.request/v1"), 401, "invalid_token", nil},
		{"no credential, invalid NLIP", "POST", "/nlip/", "", "application/json", nlipJSON("", "", `{"format":"text"}`), 401, "authentication_required", nil},
		{"no send scope", "POST", "/nlip/", readOnly, "application/json", send("meeting.request/v1"), 403, "insufficient_scope", nil},
		{"unknown path", "POST", "/nlip/other", r.token, "application/json", send("meeting.request/v1"), 404, "not_found", nil},
		{"wrong method", "PUT", "/nlip/", r.token, "application/json", send("meeting.request/v1"), 405, "method_not_allowed", nil},
		{"alp parts without alp messagetype", "POST", "/nlip/", r.token, "application/json", nlipJSON("", to), 422, "not_an_alp_send", nil},
		{"unknown type", "POST", "/nlip/", r.token, "application/json", send("no.such.type/v1"), 422, "unknown_message_type", nil},
		{"invalid body", "POST", "/nlip/", r.token, "application/json", nlipJSON("alp:meeting.request/v1", to, body(`{"subject":1}`)), 422, "invalid_body", nil},
		{"key reused", "POST", "/nlip/", r.token, "application/json", nlipJSON("alp:priorities.request/v1", to, body(`{"horizon":"week","max_items":5}`)), 422, "idempotency_key_reused", []string{"Idempotency-Key", "k-echo"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			resp, reply := r.request(t, c.method, c.path, c.token, c.contentType, c.body, c.header...)
			if resp.StatusCode != c.status {
				t.Fatalf("status %d, want %d: %+v", resp.StatusCode, c.status, reply)
			}
			if c.code != "" {
				if code, _ := apiError(t, reply)["code"].(string); !strings.HasPrefix(code, c.code) {
					t.Errorf("code %q, want %q", code, c.code)
				}
			}
			echoed(t, reply)
		})
	}

	// CBOR: the same in the request's encoding.
	m, err := nlip.DecodeJSON(send("meeting.request/v1"), nlip.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	cb, err := nlip.EncodeCBOR(m)
	if err != nil {
		t.Fatal(err)
	}
	if resp, reply := r.post(t, "/nlip/", "", "application/cbor", cb); resp.StatusCode != 401 ||
		resp.Header.Get("Content-Type") != "application/cbor" || !slices.Equal(tokens(reply), wantTokens) {
		t.Errorf("CBOR without a credential: %d %s tokens %v", resp.StatusCode, resp.Header.Get("Content-Type"), tokens(reply))
	}

	// Over the rate: an agent of a broker whose agents have a burst of one.
	slow := newRig(t, rigOptions{door: ingress.DoorConfig{PerAgent: ingress.Rate{Limit: 0.01, Burst: 1}}})
	for i, want := range []int{200, 429} {
		resp, reply := slow.post(t, "/nlip/", slow.token, "application/json", send("meeting.request/v1"))
		if resp.StatusCode != want || !slices.Equal(tokens(reply), wantTokens) {
			t.Errorf("request %d: %d, want %d; tokens %v", i, resp.StatusCode, want, tokens(reply))
		}
	}

	// What cannot be read as NLIP has no tokens to give.
	for _, c := range []struct {
		name, contentType string
		status            int
	}{{"another media type", "text/plain", 415}, {"not JSON at all", "application/json", 400}} {
		data := nlipJSON("", "")
		if c.status == 400 {
			data = append([]byte("x"), data...)
		}
		if resp, reply := r.post(t, "/nlip/", r.token, c.contentType, data); resp.StatusCode != c.status || len(reply.Tokens()) != 0 {
			t.Errorf("%s: %d, tokens %v", c.name, resp.StatusCode, tokens(reply))
		}
	}
}

// echoed checks that reply carries the test tokens, in order, the
// authentication token with its label (other tokens of the request, such as
// an idempotency key, come back too).
func echoed(t testing.TB, reply *nlip.Message) {
	t.Helper()
	var got []string
	for _, tok := range tokens(reply) {
		if slices.Contains(wantTokens, tok) {
			got = append(got, tok)
		}
	}
	if !slices.Equal(got, wantTokens) {
		t.Errorf("tokens echoed %v, want %v", tokens(reply), wantTokens)
	}
	for _, sm := range reply.Submessages {
		if sm.Subformat == "authentication" && sm.Label != "who" {
			t.Errorf("the authentication token lost its label: %+v", sm)
		}
	}
}

// request sends a request with any method.
func (r *rig) request(t testing.TB, method, path, token, contentType string, body []byte, header ...string) (*http.Response, *nlip.Message) {
	t.Helper()
	req, err := http.NewRequest(method, r.srv.URL+path, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	return r.do(t, req)
}

// TestEveryWebSocketAnswerEchoesTheTokens: the same on both WebSocket
// endpoints, for every message read whole.
func TestEveryWebSocketAnswerEchoesTheTokens(t *testing.T) {
	r := newRig(t, rigOptions{})
	readOnly := r.mint(t, "agent-ro", accesstoken.ClassConsumer, "alp.read")
	to := `{"label":"alp.to","format":"structured","subformat":"uri","content":"acct:bo@other.example"}`
	sendBody := `{"label":"alp.body","format":"structured","subformat":"json","content":` + meetingBody + `}`
	cases := []struct {
		name, token string
		body        []byte
		code        string
	}{
		{"sent", r.token, nlipJSON("alp:meeting.request/v1", to, sendBody), ""},
		{"plain text", r.token, nlipJSON("", ""), ""},
		{"malformed after the tokens", r.token, nlipJSON("", "", `{"format": x}`), "nlip_malformed"},
		{"invalid NLIP after the tokens", r.token, nlipJSON("", "", `{"format":"text"}`), "nlip_missing_field"},
		{"no recipient", r.token, nlipJSON("alp:meeting.request/v1", sendBody), "invalid_alp_message"},
		{"no send scope", readOnly, nlipJSON("alp:meeting.request/v1", to, sendBody), "insufficient_scope"},
		{"alp parts without alp messagetype", r.token, nlipJSON("", to), "not_an_alp_send"},
		{"unknown type", r.token, nlipJSON("alp:no.such.type/v1", to, sendBody), "unknown_message_type"},
	}
	for _, path := range []string{"/nlip/ws/text", "/nlip/ws"} {
		conns := map[string]*websocket.Conn{}
		for _, token := range []string{r.token, readOnly} {
			conn, _, err := r.dial(t, path, token, "")
			if err != nil {
				t.Fatal(err)
			}
			conns[token] = conn
		}
		for _, c := range cases {
			t.Run(path+" "+c.name, func(t *testing.T) {
				conn := conns[c.token]
				typ, data := websocket.MessageText, c.body
				if path == "/nlip/ws" {
					typ, data = websocket.MessageBinary, toCBOR(t, c.body)
				}
				_, reply := exchange(t, conn, typ, data)
				if c.code != "" {
					if code, _ := apiError(t, reply)["code"].(string); code != c.code {
						t.Errorf("code %q, want %q", code, c.code)
					}
				} else if reply.MessageType == "error" {
					t.Errorf("refused: %+v", reply)
				}
				echoed(t, reply)
			})
		}
	}
}

// toCBOR is the CBOR form of a JSON NLIP message, built by hand where
// the message is not valid NLIP (the codec encodes valid messages only).
func toCBOR(t testing.TB, data []byte) []byte {
	t.Helper()
	if m, err := nlip.DecodeJSON(data, nlip.Limits{}); err == nil {
		out, err := nlip.EncodeCBOR(m)
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	if bytes.Contains(data, []byte(`"format": x`)) {
		// Not JSON, so not CBOR either: cut a valid message short after
		// its tokens.
		out := toCBOR(t, nlipJSON("", ""))
		// The array of 2 submessages claims 3: the third is missing.
		i := bytes.Index(out, []byte{0x82, 0xa3})
		if i < 0 {
			t.Fatal("no submessages array in the CBOR form")
		}
		out[i] = 0x83
		return out
	}
	var v any
	if err := json.Unmarshal(data, &v); err != nil {
		t.Fatal(err)
	}
	out, err := cbor.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

package nlipapi_test

import (
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/coder/websocket"

	"github.com/alpd-project/alpd/internal/nlip"
)

// TestPlainTextIsAnsweredWithWhatThisIs: a plain NLIP text message, what
// every NLIP client sends first, is answered 200 as an NLIP end-point
// answers (issue 13: it was 422 not_an_alp_send): what this broker is, how
// to send (with an example that works), the inbox and replies, the tokens
// echoed. The credential is still required.
func TestPlainTextIsAnsweredWithWhatThisIs(t *testing.T) {
	r := newRig(t, rigOptions{})
	hello := []byte(`{"format":"text","subformat":"english","content":"hello","submessages":[` + convToken + "," + authToken + `]}`)
	resp, reply := r.post(t, "/nlip/", r.token, "application/json", hello)
	if resp.StatusCode != http.StatusOK || reply.MessageType != "" || reply.Format != "text" || reply.Subformat != "english" {
		t.Fatalf("%d %+v", resp.StatusCode, reply)
	}
	text := textOf(reply)
	for _, want := range []string{"ALP broker for " + tenant, "ana@example.org", `"alp:<type>"`, `"alp.to"`, `"alp.body"`,
		"inbox", `"alp.inbox"`, `"alp.ack"`, `"alp.in_reply_to"`, "docs/nlip.md"} {
		if !strings.Contains(text, want) {
			t.Errorf("the text lacks %q:\n%s", want, text)
		}
	}
	if _, ok := reply.FindLabel("alp.capabilities"); !ok {
		t.Error("no alp.capabilities")
	}
	echoed(t, reply)

	// The example in the text is a send the broker takes.
	var example string
	for _, line := range strings.Split(text, "\n") {
		if strings.HasPrefix(line, "{") {
			example = line
		}
	}
	if _, err := nlip.DecodeJSON([]byte(example), nlip.Limits{}); err != nil {
		t.Fatalf("the example %q is not NLIP: %v", example, err)
	}
	if resp, reply := r.post(t, "/nlip/", r.token, "application/json", []byte(example)); resp.StatusCode != http.StatusOK || result(t, reply)["type"] != "meeting.request/v1" {
		t.Errorf("the example was not taken: %d %+v", resp.StatusCode, reply)
	}

	// The same text on the WebSocket and in a control reply.
	c, _, err := r.dial(t, "/nlip/ws/text", r.token, "")
	if err != nil {
		t.Fatal(err)
	}
	if _, ws := exchange(t, c, websocket.MessageText, hello); textOf(ws) != text || !slices.Equal(tokens(ws), tokens(reply)) {
		t.Errorf("WebSocket: %+v", ws)
	}
	_, control := r.post(t, "/nlip/", r.token, "application/json", []byte(`{"messagetype":"control","format":"text","subformat":"english","content":"?"}`))
	if !control.IsControl() || textOf(control) != text {
		t.Errorf("control reply: %+v", control)
	}

	// Without a credential: 401, tokens echoed all the same.
	resp, reply = r.post(t, "/nlip/", "", "application/json", hello)
	if e := apiError(t, reply); resp.StatusCode != http.StatusUnauthorized || e["code"] != "authentication_required" {
		t.Errorf("no credential: %d %v", resp.StatusCode, e)
	}
	echoed(t, reply)
	// RFC 6750 §3.1: no error in the challenge when no token was sent.
	if ch := resp.Header.Get("WWW-Authenticate"); !strings.HasPrefix(ch, "Bearer ") || strings.Contains(ch, "error=") {
		t.Errorf("WWW-Authenticate %q", ch)
	}
}

package mcpapi_test

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/alpd-project/alpd/broker"
	"github.com/alpd-project/alpd/internal/accesstoken"
	"github.com/alpd-project/alpd/internal/testkit"
	"github.com/alpd-project/alpd/services/identity"
	"github.com/alpd-project/alpd/services/ingress"
	"github.com/alpd-project/alpd/services/ingress/mcpapi"
)

// TestUnauthenticated: without a token /mcp answers 401 with the RFC 9728
// resource_metadata challenge naming the scopes, as problem details; a
// token that is not valid is 401 invalid_token.
func TestUnauthenticated(t *testing.T) {
	r := newRig(t, mcpapi.Config{})
	resp, body := r.rawPost(t, "", initialize)
	challenge := resp.Header.Get("WWW-Authenticate")
	if resp.StatusCode != http.StatusUnauthorized || problem(t, body) != "authentication_required" ||
		!strings.Contains(challenge, `resource_metadata="`+publicURL+`/.well-known/oauth-protected-resource"`) ||
		!strings.Contains(challenge, `scope="alp.read alp.send"`) {
		t.Fatalf("no token: %d %q %s", resp.StatusCode, challenge, body)
	}
	resp, body = r.rawPost(t, "not-a-token", initialize)
	if resp.StatusCode != http.StatusUnauthorized || problem(t, body) != "invalid_token" ||
		!strings.Contains(resp.Header.Get("WWW-Authenticate"), `error="invalid_token"`) {
		t.Fatalf("bad token: %d %q %s", resp.StatusCode, resp.Header.Get("WWW-Authenticate"), body)
	}
}

// TestTokenForAnotherAudience: a token the broker's own issuer signed for
// another resource is refused (RFC 8707 audience binding), and opens no
// session.
func TestTokenForAnotherAudience(t *testing.T) {
	r := newRig(t, mcpapi.Config{})
	a := r.agent
	issuer := &accesstoken.Issuer{Keys: r.br.KS, Issuers: map[string]string{tenant: identity.IssuerURL(publicURL, tenant)}}
	tok, err := issuer.Mint(context.Background(), accesstoken.Claims{Subject: a.Person.ID, Audience: "https://other.example/mcp",
		Tenant: tenant, ClientID: "agent", AgentID: a.AgentID, GrantID: a.Grant.ID, Class: accesstoken.ClassConsumer,
		Scopes: []string{"alp.read", "alp.send"}})
	if err != nil {
		t.Fatal(err)
	}
	resp, body := r.rawPost(t, tok, initialize)
	if resp.StatusCode != http.StatusUnauthorized || problem(t, body) != "invalid_token" || resp.Header.Get("Mcp-Session-Id") != "" ||
		!strings.Contains(resp.Header.Get("WWW-Authenticate"), "resource_metadata=") {
		t.Fatalf("token for another audience: %d %q %s", resp.StatusCode, resp.Header.Get("WWW-Authenticate"), body)
	}
}

// TestOriginChecked: a browser page on another origin is refused (403,
// DNS rebinding: the Host header does not help it), the broker's own
// origin and an allowed pattern pass, and a preflight from an allowed
// origin is answered without a credential.
func TestOriginChecked(t *testing.T) {
	r := newRig(t, mcpapi.Config{AllowedOrigins: []string{"*.app.example"}})
	resp, body := r.rawPost(t, r.token, initialize, "Origin", "http://evil.example", "Host", "evil.example")
	if resp.StatusCode != http.StatusForbidden || problem(t, body) != "origin_not_allowed" {
		t.Fatalf("foreign origin: %d %s", resp.StatusCode, body)
	}
	for _, origin := range []string{publicURL, "https://web.app.example"} {
		if resp, body := r.rawPost(t, r.token, initialize, "Origin", origin); resp.StatusCode != http.StatusOK {
			t.Fatalf("origin %s: %d %s", origin, resp.StatusCode, body)
		}
	}
	// The broker's host over another scheme is another origin.
	if resp, _ := r.rawPost(t, r.token, initialize, "Origin", "http://broker.example"); resp.StatusCode != http.StatusForbidden {
		t.Fatalf("http origin of an https broker: %d", resp.StatusCode)
	}
	req, _ := http.NewRequest(http.MethodOptions, r.url, nil)
	req.Header.Set("Origin", "https://web.app.example")
	req.Header.Set("Access-Control-Request-Method", "POST")
	req.Header.Set("Access-Control-Request-Headers", "authorization, content-type, mcp-session-id")
	pre, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	pre.Body.Close()
	if pre.StatusCode/100 != 2 || pre.Header.Get("Access-Control-Allow-Origin") != "https://web.app.example" ||
		pre.Header.Get("Access-Control-Allow-Credentials") != "" {
		t.Fatalf("preflight: %d %v", pre.StatusCode, pre.Header)
	}
}

// TestSessionBoundToAgent: a session opened by one agent's token is
// refused to another agent of the same person and to another person; the
// same agent with a fresh token keeps it.
func TestSessionBoundToAgent(t *testing.T) {
	r := newRig(t, mcpapi.Config{})
	resp, body := r.rawPost(t, r.token, initialize)
	id := resp.Header.Get("Mcp-Session-Id")
	if resp.StatusCode != http.StatusOK || id == "" {
		t.Fatalf("initialize: %d %s", resp.StatusCode, body)
	}
	list := `{"jsonrpc":"2.0","id":2,"method":"tools/list"}`
	lee := r.br.Agent(t, tenant, "sub-lee", "lee@example.org", "lee-agent", "alp.send", "alp.read")
	for name, tok := range map[string]string{
		"another agent of the same person": r.mint(t, r.agent, "agent-2", "alp.send", "alp.read"),
		"another person":                   lee.Token,
	} {
		resp, body := r.rawPost(t, tok, list, "Mcp-Session-Id", id, "Mcp-Protocol-Version", "2025-11-25")
		if resp.StatusCode != http.StatusForbidden || strings.Contains(string(body), "send_message") {
			t.Errorf("%s on ana's agent-1 session: %d %s", name, resp.StatusCode, body)
		}
	}
	fresh := r.mint(t, r.agent, "agent-1", "alp.send", "alp.read")
	if resp, body := r.rawPost(t, fresh, list, "Mcp-Session-Id", id, "Mcp-Protocol-Version", "2025-11-25"); resp.StatusCode != http.StatusOK ||
		!strings.Contains(string(body), "send_message") {
		t.Fatalf("the same agent's new token: %d %s", resp.StatusCode, body)
	}
}

// TestInsufficientScope: a tools/call whose tool needs a scope the token
// lacks is refused before it runs, 403 with the step-up challenge; the
// tools the token allows still work.
func TestInsufficientScope(t *testing.T) {
	r := newRig(t, mcpapi.Config{})
	readOnly := r.mint(t, r.agent, "agent-1", "alp.read")
	send := `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"send_message","arguments":{"to":"bo@other.example","type":"note/v1","body":{"text":"hi"}}}}`
	resp, body := r.rawPost(t, readOnly, send)
	challenge := resp.Header.Get("WWW-Authenticate")
	if resp.StatusCode != http.StatusForbidden || problem(t, body) != "insufficient_scope" ||
		!strings.Contains(challenge, `error="insufficient_scope"`) || !strings.Contains(challenge, `scope="alp.read alp.send"`) ||
		!strings.Contains(challenge, "resource_metadata=") {
		t.Fatalf("send with a read-only token: %d %q %s", resp.StatusCode, challenge, body)
	}
	// A batch hides nothing.
	resp, _ = r.rawPost(t, readOnly, "["+send+"]")
	if resp.StatusCode != http.StatusForbidden {
		t.Fatalf("batched send with a read-only token: %d", resp.StatusCode)
	}
	// A reply reads the item it answers: it takes alp.read besides
	// alp.send, as on the other doors.
	sendOnly := r.mint(t, r.agent, "agent-1", "alp.send")
	reply := `{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"reply","arguments":{"item_id":"0192f0c4-7b1e-7a00-8000-000000000001","type":"note/v1","body":{"text":"hi"}}}}`
	resp, body = r.rawPost(t, sendOnly, reply)
	challenge = resp.Header.Get("WWW-Authenticate")
	if resp.StatusCode != http.StatusForbidden || problem(t, body) != "insufficient_scope" || !strings.Contains(challenge, `scope="alp.read alp.send"`) {
		t.Fatalf("reply with a send-only token: %d %q %s", resp.StatusCode, challenge, body)
	}
	cs := r.connect(t, readOnly, nil)
	var types struct{ Types []any }
	if res := call(t, cs, "list_message_types", map[string]any{}, &types); res.IsError || len(types.Types) == 0 {
		t.Fatalf("list types with a read-only token: %+v", res)
	}
}

// TestSessionsBounded: an agent holds at most MaxSessionsPerAgent
// sessions and a person MaxSessionsPerPerson: a session past a bound
// closes the least recently used one (which then answers 404, so its
// client initializes again), never refuses the agent.
func TestSessionsBounded(t *testing.T) {
	r := newRig(t, mcpapi.Config{MaxSessionsPerAgent: 2, MaxSessionsPerPerson: 3})
	list := `{"jsonrpc":"2.0","id":2,"method":"tools/list"}`
	use := func(tok, id string) int {
		resp, _ := r.rawPost(t, tok, list, "Mcp-Session-Id", id, "Mcp-Protocol-Version", "2025-11-25")
		return resp.StatusCode
	}
	open := func(tok string) string {
		resp, body := r.rawPost(t, tok, initialize)
		if resp.StatusCode != http.StatusOK || resp.Header.Get("Mcp-Session-Id") == "" {
			t.Fatalf("initialize: %d %s", resp.StatusCode, body)
		}
		return resp.Header.Get("Mcp-Session-Id")
	}
	s1, s2 := open(r.token), open(r.token)
	if use(r.token, s1) != http.StatusOK { // s2 is now the least recently used
		t.Fatal("s1 unusable")
	}
	s3 := open(r.token)
	testkit.Eventually(t, 5*time.Second, func() error {
		if got := use(r.token, s2); got != http.StatusNotFound {
			return fmt.Errorf("the least recently used session answers %d", got)
		}
		return nil
	})
	if use(r.token, s1) != http.StatusOK || use(r.token, s3) != http.StatusOK {
		t.Fatal("the sessions within the bound were closed")
	}
	// ana's second agent: its first session fits (3 of ana's), its second
	// closes ana's least recently used (s1).
	other := r.mint(t, r.agent, "agent-2", "alp.read")
	o1 := open(other)
	if use(r.token, s3) != http.StatusOK || use(other, o1) != http.StatusOK {
		t.Fatal("sessions within the person's bound were closed")
	}
	o2 := open(other)
	testkit.Eventually(t, 5*time.Second, func() error {
		if got := use(r.token, s1); got != http.StatusNotFound {
			return fmt.Errorf("the person's least recently used session answers %d", got)
		}
		return nil
	})
	for _, s := range []struct{ tok, id string }{{r.token, s3}, {other, o1}, {other, o2}} {
		if use(s.tok, s.id) != http.StatusOK {
			t.Fatalf("session %s closed", s.id)
		}
	}
}

// TestRateLimited: tool calls count against the door's per-agent rate;
// past it a call is a rate_limited tool error with retry_after.
func TestRateLimited(t *testing.T) {
	r := newRigWith(t, broker.Config{Door: ingress.DoorConfig{PerAgent: ingress.Rate{Limit: 0.01, Burst: 2}}}, nil)
	cs := r.connect(t, r.token, nil)
	for range 2 {
		if res := call(t, cs, "list_message_types", map[string]any{}, nil); res.IsError {
			t.Fatalf("within the burst: %+v", res.Content[0])
		}
	}
	e := errorOf(t, call(t, cs, "list_message_types", map[string]any{}, nil))
	if e.Code != "rate_limited" || e.Status != http.StatusTooManyRequests || e.RetryAfter < 1 {
		t.Fatalf("over the rate: %+v", e)
	}
}

// TestQuietStreamHeartbeat: a session's stream that carries nothing gets
// an SSE comment every Heartbeat, so a write deadline per write never
// cuts it for being quiet.
func TestQuietStreamHeartbeat(t *testing.T) {
	r := newRig(t, mcpapi.Config{Heartbeat: 200 * time.Millisecond})
	resp, body := r.rawPost(t, r.token, initialize)
	id := resp.Header.Get("Mcp-Session-Id")
	if resp.StatusCode != http.StatusOK || id == "" {
		t.Fatalf("initialize: %d %s", resp.StatusCode, body)
	}
	r.rawPost(t, r.token, `{"jsonrpc":"2.0","method":"notifications/initialized"}`, "Mcp-Session-Id", id, "Mcp-Protocol-Version", "2025-11-25")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, r.url, nil)
	req.Header.Set("Authorization", "Bearer "+r.token)
	req.Header.Set("Accept", "text/event-stream")
	req.Header.Set("Mcp-Session-Id", id)
	req.Header.Set("Mcp-Protocol-Version", "2025-11-25")
	stream, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer stream.Body.Close()
	if stream.StatusCode != http.StatusOK {
		t.Fatalf("GET: %d", stream.StatusCode)
	}
	beats := 0
	sc := bufio.NewScanner(stream.Body)
	for sc.Scan() && beats < 3 {
		if sc.Text() == ": keepalive" {
			beats++
		}
	}
	if beats < 3 {
		t.Fatalf("%d heartbeats on a quiet stream in 2s", beats)
	}
}
